"""The config loader: good files load, each bad one gives one error naming file and key."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdc_platform.cli import main
from cdc_platform.config import BatchMode, load_config
from cdc_platform.config.leases import DatabaseLeaseConfig, ZooKeeperLeaseConfig
from cdc_platform.errors import ConfigFileError
from cdc_platform.sink.destination_lake import DestinationLake

pytestmark = pytest.mark.unit

ENV = {"CDC_SOURCE_PASSWORD": "s3cret-value"}

GOOD = """\
source:
  host: 127.0.0.1
  port: 3306
  user: cdc
  password_env: CDC_SOURCE_PASSWORD
  server_id: 1001
  include_tables: ['shop\\..*']
store: {buffer_size: 16384, memunit: 1024, batch_mode: MEMSIZE, ddl_isolation: false}
sink: {table: changes}
"""


def write_destination(conf: Path, name: str, text: str) -> Path:
    directory = conf / "destinations" / name
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "instance.yaml"
    path.write_text(text)
    return path


@pytest.fixture
def conf(tmp_path: Path) -> Path:
    root = tmp_path / "conf"
    root.mkdir()
    return root


def test_good_destination_loads_with_defaults(conf: Path) -> None:
    path = write_destination(conf, "shop", GOOD)
    loaded = load_config(conf, ENV)
    assert loaded.errors == {}
    dest = loaded.destinations["shop"]
    assert dest.path == path
    assert dest.config.source.server_id == 1001
    assert dest.config.source.include_tables == [r"shop\..*"]
    assert dest.config.store.batch_mode is BatchMode.MEMSIZE
    assert dest.config.sink.table == "changes"
    assert dest.config.source.decode_workers == "auto", "as many decode workers as cores"
    assert isinstance(loaded.platform.lease, DatabaseLeaseConfig)
    assert loaded.lake_root == conf.resolve().parent / "var" / "lake"
    assert DestinationLake.of(loaded, "shop").change_log.endswith("var/lake/shop/changes")


def test_content_hash_follows_content_not_mtime(conf: Path) -> None:
    path = write_destination(conf, "shop", GOOD)
    first = load_config(conf, ENV).destinations["shop"].content_hash
    path.write_text(GOOD)
    assert load_config(conf, ENV).destinations["shop"].content_hash == first
    path.write_text(GOOD.replace("1001", "1002"))
    assert load_config(conf, ENV).destinations["shop"].content_hash != first


def test_the_shipped_conf_directory_is_valid() -> None:
    shipped = Path(__file__).resolve().parents[2] / "conf"
    loaded = load_config(shipped, ENV)
    assert loaded.errors == {}
    assert "shop" in loaded.destinations


def test_zookeeper_platform_config(conf: Path) -> None:
    (conf / "platform.yaml").write_text(
        "lease: {backend: zookeeper, hosts: '127.0.0.1:2181', switch_delay_seconds: 2}\n"
    )
    lease = load_config(conf, ENV).platform.lease
    assert isinstance(lease, ZooKeeperLeaseConfig)
    assert lease.switch_delay_seconds == 2


BAD_DESTINATIONS = [
    pytest.param(
        GOOD.replace("port: 3306", "prot: 3306"), "source.prot", "unknown key", id="unknown-key"
    ),
    pytest.param(
        GOOD.replace("port: 3306", "port: many"), "source.port", "integer", id="wrong-type"
    ),
    pytest.param(
        GOOD.replace("port: 3306", "port: 70000"), "source.port", "65535", id="port-range"
    ),
    pytest.param(
        GOOD.replace("buffer_size: 16384", "buffer_size: 1000"),
        "store.buffer_size",
        "power of two",
        id="buffer-not-power-of-two",
    ),
    pytest.param(
        GOOD.replace("batch_mode: MEMSIZE", "batch_mode: BYTES"),
        "store.batch_mode",
        "ITEMSIZE",
        id="bad-enum",
    ),
    pytest.param(
        GOOD.replace("CDC_SOURCE_PASSWORD", "CDC_OTHER_PASSWORD"),
        "source.password_env",
        "CDC_OTHER_PASSWORD is not set",
        id="missing-password-variable",
    ),
    pytest.param(
        GOOD.replace("  user: cdc\n", ""), "source.user", "missing", id="missing-required-key"
    ),
    pytest.param(
        GOOD.replace("server_id: 1001", "server_id: 0"),
        "source.server_id",
        "greater than",
        id="server-id-zero",
    ),
    pytest.param(
        GOOD.replace("['shop\\..*']", "['shop\\..*', '(unclosed']"),
        "source.include_tables",
        "item 1",
        id="bad-regex",
    ),
    pytest.param(
        GOOD.replace("table: changes", "table: '../escape'"),
        "sink.table",
        "pattern",
        id="sink-path-escape",
    ),
    *(
        pytest.param(
            GOOD.replace("server_id: 1001", f"server_id: 1001\n  decode_workers: {bad}"),
            "source.decode_workers",
            "neither auto (the machine's cores) nor a whole number of processes from 1 to 64",
            id=f"decode-workers-{bad}",
        )
        for bad in ("0", "65", "many", "true", "2.5", "null")
    ),
    pytest.param(GOOD + "surprise: 1\n", "surprise", "unknown key", id="unknown-top-level-key"),
    pytest.param(
        GOOD.replace("password_env: CDC_SOURCE_PASSWORD", "password: hunter2"),
        "source.password",
        "unknown key",
        id="inline-password-refused",
    ),
    pytest.param(
        GOOD.replace("ddl_isolation: false", "ddl_isolation: sometimes"),
        "store.ddl_isolation",
        "boolean",
        id="bad-bool",
    ),
    pytest.param("source: [1, 2]\n", "source", "valid dictionary", id="source-not-a-mapping"),
    pytest.param("- just\n- a list\n", "", "mapping", id="file-not-a-mapping"),
    pytest.param("source: {host: [unclosed\n", "", "not valid YAML at line", id="broken-yaml"),
    pytest.param("", "source", "missing", id="empty-file"),
]


@pytest.mark.parametrize(("text", "key", "problem"), BAD_DESTINATIONS)
def test_bad_destination_names_file_and_key(conf: Path, text: str, key: str, problem: str) -> None:
    path = write_destination(conf, "bad", text)
    write_destination(conf, "good", GOOD)
    loaded = load_config(conf, ENV)
    assert list(loaded.destinations) == ["good"], "one bad destination must not stop the others"
    error = loaded.errors["bad"]
    assert isinstance(error, ConfigFileError)
    assert error.path == str(path)
    assert error.key == key
    assert problem in error.problem
    assert str(path) in str(error)
    assert "hunter2" not in str(error)


def test_missing_instance_file_is_an_error(conf: Path) -> None:
    (conf / "destinations" / "empty").mkdir(parents=True)
    error = load_config(conf, ENV).errors["empty"]
    assert error.path.endswith("destinations/empty/instance.yaml")
    assert "missing" in error.problem


def test_bad_destination_name(conf: Path) -> None:
    write_destination(conf, "bad name!", GOOD)
    error = load_config(conf, ENV).errors["bad name!"]
    assert "destination name" in error.problem


def test_editor_temp_files_are_ignored(conf: Path) -> None:
    write_destination(conf, "shop", GOOD)
    (conf / "destinations" / "shop" / ".instance.yaml.swp").write_text("garbage: [")
    (conf / "destinations" / "shop" / "instance.yaml~").write_text("garbage: [")
    (conf / "destinations" / ".hidden").mkdir()
    loaded = load_config(conf, ENV)
    assert list(loaded.destinations) == ["shop"]
    assert loaded.errors == {}


def test_bad_platform_file_names_key(conf: Path) -> None:
    (conf / "platform.yaml").write_text("lease: {backend: database, expiry_seconds: -1}\n")
    with pytest.raises(ConfigFileError) as caught:
        load_config(conf, ENV)
    assert caught.value.key == "lease.expiry_seconds"
    assert caught.value.path.endswith("platform.yaml")


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("metrics: {port: 70000}\n", "metrics.port"),
        ("metrics: {port: -1}\n", "metrics.port"),
        ("metrics: {adress: 0.0.0.0}\n", "metrics.adress"),
    ],
)
def test_bad_metrics_settings_name_the_key(conf: Path, text: str, key: str) -> None:
    (conf / "platform.yaml").write_text(text)
    with pytest.raises(ConfigFileError) as caught:
        load_config(conf, ENV)
    assert caught.value.key == key


def test_metrics_settings_load(conf: Path) -> None:
    (conf / "platform.yaml").write_text("metrics: {host: 0.0.0.0, port: 0}\n")
    metrics = load_config(conf, ENV).platform.metrics
    assert (metrics.host, metrics.port) == ("0.0.0.0", 0)


def test_unknown_lease_backend(conf: Path) -> None:
    (conf / "platform.yaml").write_text("lease: {backend: etcd}\n")
    with pytest.raises(ConfigFileError) as caught:
        load_config(conf, ENV)
    assert caught.value.key == "lease"
    assert "database" in caught.value.problem


def test_password_never_in_repr(conf: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CDC_SOURCE_PASSWORD", "s3cret-value")
    write_destination(conf, "shop", GOOD)
    source = load_config(conf).destinations["shop"].config.source
    secret = source.password()
    assert secret.get_secret_value() == "s3cret-value"
    assert "s3cret-value" not in repr(secret)
    assert "s3cret-value" not in repr(source)
    assert "s3cret-value" not in str(secret)


def test_cli_config_check(
    conf: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CDC_SOURCE_PASSWORD", "x")
    write_destination(conf, "good", GOOD)
    assert main(["config", "check", "--conf", str(conf)]) == 0
    assert "good: OK" in capsys.readouterr().out
    write_destination(conf, "bad", GOOD.replace("port: 3306", "port: nope"))
    assert main(["config", "check", "--conf", str(conf)]) == 1
    out = capsys.readouterr().out
    assert "good: OK" in out
    assert "bad: ERROR" in out
    assert "source.port" in out


def test_cli_missing_conf_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "check", "--conf", str(tmp_path / "nope")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_cli_help_lists_commands(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["--help"])
    assert caught.value.code == 0
    assert "config" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("setting", "cores", "processes"),
    [("", 2, 2), ("", 1, 1), ("", 48, 8), ("auto", 4, 4), ("1", 8, 1), ("12", 2, 12)],
)
def test_decode_workers_auto_is_the_usable_cores(
    conf: Path, monkeypatch: pytest.MonkeyPatch, setting: str, cores: int, processes: int
) -> None:
    text = GOOD.replace("server_id: 1001", f"server_id: 1001\n  decode_workers: {setting}")
    write_destination(conf, "shop", text if setting else GOOD)
    source = load_config(conf, ENV).destinations["shop"].config.source
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: set(range(cores)), raising=False)
    assert source.decode_processes() == processes
