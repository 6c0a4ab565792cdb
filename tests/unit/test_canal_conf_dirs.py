"""`import-canal` on conf directories as Canal users have them: the full shipped key set,
encodings, several instances, names, manager mode, settings that change what is captured."""

from __future__ import annotations

import contextlib
import io
import shutil
from pathlib import Path

import pytest
import yaml

from cdc_platform.cli import main
from cdc_platform.config import load_config
from cdc_platform.config.canal_import import import_canal
from cdc_platform.errors import ConfigError

pytestmark = pytest.mark.unit

FULL = Path(__file__).parent.parent / "fixtures" / "canal_full"


def shipped(tmp_path: Path, **instance: str) -> Path:
    """The full conf directory, saved as Windows editors and Chinese desktops save it: CRLF
    line ends, a GBK comment in canal.properties (not UTF-8: Canal reads ISO-8859-1)."""
    target = tmp_path / "canal"
    shutil.copytree(FULL, target)
    server = target / "canal.properties"
    gbk_comment = "# 服务端配置\n".encode("gbk")
    server.write_bytes(gbk_comment + server.read_bytes().replace(b"\n", b"\r\n"))
    props = target / "example" / "instance.properties"
    text = props.read_text(encoding="utf-8")
    text += "".join(f"canal.instance.{key}={value}\n" for key, value in instance.items())
    props.write_bytes(text.replace("\n", "\r\n").encode("utf-8"))
    return target


def instance_yaml(out: Path, name: str = "example") -> dict[str, object]:
    loaded = yaml.safe_load((out / "destinations" / name / "instance.yaml").read_text())
    assert isinstance(loaded, dict)
    return loaded


def run_cli(*args: str) -> tuple[int, str]:
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = main(list(args))
    return code, printed.getvalue()


def test_shipped_conf_directory_imports(tmp_path: Path) -> None:
    out = tmp_path / "conf"
    code, text = run_cli("import-canal", str(shipped(tmp_path)), "--out", str(out))
    assert code == 0, text
    source = instance_yaml(out)["source"]
    assert isinstance(source, dict)
    assert source["include_tables"] == [r"(?i).*\..*"]
    assert source["exclude_tables"] == [r"(?i)mysql\.slave_.*"]
    assert source["user"] == "canal"
    assert instance_yaml(out)["store"] == {
        "buffer_size": 16384,
        "memunit": 1024,
        "batch_mode": "MEMSIZE",
        "ddl_isolation": False,
    }
    # Canal's defaults filter nothing: no warning for them, and they are not "not imported"
    assert "WARNING" not in text
    assert "canal.instance.filter.dml.insert" not in text
    assert "kafka.bootstrap.servers" in text
    assert "canal-secret-pw" not in text
    assert "4ACFE3202A5FF5CF" not in text
    assert load_config(out, environ={"CDC_EXAMPLE_PASSWORD": "x"}).errors == {}


def test_utf8_bom_keeps_the_first_key(tmp_path: Path) -> None:
    canal = shipped(tmp_path)
    props = canal / "example" / "instance.properties"
    props.write_bytes(b"\xef\xbb\xbfcanal.instance.mysql.slaveId=77\r\n" + props.read_bytes())
    out = tmp_path / "conf"
    assert import_canal(canal, out).errors == {}
    source = instance_yaml(out)["source"]
    assert isinstance(source, dict)
    assert source["server_id"] == 77


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("master.position", "12ab"),
        ("master.timestamp", "yesterday"),
        ("memory.buffer.size", "16k"),
        ("mysql.slaveId", "one"),
    ],
)
def test_non_numeric_values_name_file_and_key(tmp_path: Path, key: str, value: str) -> None:
    extra = {key: value}
    if key == "master.position":
        extra["master.journal.name"] = "mysql-bin.000001"
    result = import_canal(shipped(tmp_path, **extra), tmp_path / "conf")
    error = result.errors["example"]
    assert "instance.properties line" in error
    assert f"canal.instance.{key} must be a whole number, got {value!r}" in error
    assert "no canal.instance.mysql.slaveId" not in " ".join(result.notes)


def test_bad_destination_names_write_nothing_outside_out(tmp_path: Path) -> None:
    canal = shipped(tmp_path)
    server = canal / "canal.properties"
    server.write_bytes(
        server.read_bytes().replace(
            b"canal.destinations = example", b"canal.destinations = example,../../escaped,/abs"
        )
    )
    out = tmp_path / "deep" / "conf"
    result = import_canal(canal, out)
    assert "example" in result.destinations
    assert set(result.errors) == {"../../escaped", "/abs"}
    assert not (tmp_path / "escaped").exists()
    assert not (out.parent / "escaped").exists()
    written = {p.relative_to(out).as_posix() for p in result.files}
    assert written == {"platform.yaml", "destinations/example/instance.yaml"}


def test_every_instance_canal_would_start_is_imported(tmp_path: Path) -> None:
    canal = shipped(tmp_path)
    for name in ("orders-db", "orders_db"):
        shutil.copytree(canal / "example", canal / name)
    (canal / "spring").mkdir()  # Canal's own directory, never an instance
    server = canal / "canal.properties"
    server.write_bytes(
        server.read_bytes().replace(
            b"canal.destinations = example", b"canal.destinations = example,orders-db,example"
        )
    )
    out = tmp_path / "conf"
    result = import_canal(canal, out)
    assert sorted(result.destinations) == ["example", "orders-db", "orders_db"]
    notes = " ".join(result.notes)
    assert "example: listed twice" in notes
    assert "orders_db: not in canal.destinations, but canal.auto.scan starts it" in notes
    envs = result.password_envs
    assert len(set(envs.values())) == 3
    assert envs["orders-db"] == "CDC_ORDERS_DB_PASSWORD"
    assert envs["orders_db"] == "CDC_ORDERS_DB_2_PASSWORD"
    ids = [d["source"]["server_id"] for d in result.destinations.values()]
    assert len(set(ids)) == 3


def test_destinations_expr_expands_as_canal(tmp_path: Path) -> None:
    canal = shipped(tmp_path)
    for index in (1, 2):
        shutil.copytree(canal / "example", canal / f"shard{index}")
    server = canal / "canal.properties"
    server.write_bytes(
        server.read_bytes()
        .replace(b"canal.auto.scan = true", b"canal.auto.scan = false")
        .replace(b"canal.destinations = example", b"canal.destinations.expr = shard{1-2}")
    )
    result = import_canal(canal, tmp_path / "conf")
    assert sorted(result.destinations) == ["shard1", "shard2"]


def test_manager_mode_and_empty_directories_fail_clearly(tmp_path: Path) -> None:
    managed = tmp_path / "managed"
    managed.mkdir()
    (managed / "canal_local.properties").write_text("canal.admin.manager = 127.0.0.1:8089\n")
    with pytest.raises(ConfigError, match="manager mode"):
        import_canal(managed, tmp_path / "o1")
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "canal.properties").write_text("canal.destinations =\n")
    with pytest.raises(ConfigError, match="no destination"):
        import_canal(empty, tmp_path / "o2")
    assert not (tmp_path / "o2").exists()


def test_settings_that_change_the_capture_lead_as_warnings(tmp_path: Path) -> None:
    canal = shipped(
        tmp_path,
        **{
            "filter.black.field": "shop.users:email/phone",
            "filter.dml.delete": "true",
            "filter.regx": r"shop\..*",
            "enableDruid": "true",
            "dbUsername": "",
        },
    )
    shutil.copytree(canal / "example", canal / "second")
    props = canal / "second" / "instance.properties"
    props.write_bytes(props.read_bytes().replace(b"dbUsername=\r\n", b"dbUsername=canal\r\n"))
    code, text = run_cli("import-canal", str(canal), "--out", str(tmp_path / "conf"))
    assert code == 1, text  # `example` has no user: reported, `second` imported
    lines = text.splitlines()
    assert lines[0].startswith("WARNING: second: ")
    warnings = [line for line in lines if line.startswith("WARNING")]
    assert any("filter.black.field is set (column filter" in w for w in warnings)
    assert any("filter.dml.delete is set" in w for w in warnings)
    assert any("filter.regx is not a Canal setting; did you mean" in w for w in warnings)
    assert any("enableDruid=true" in w and "PLAINTEXT" in w for w in warnings)
    assert "example: ERROR" in text
    assert "dbUsername is empty" in text
    assert "shop.users:email" not in text


def test_reimport_adds_new_destinations(tmp_path: Path) -> None:
    canal = shipped(tmp_path)
    out = tmp_path / "conf"
    assert import_canal(canal, out).errors == {}
    before = (out / "destinations" / "example" / "instance.yaml").read_bytes()
    shutil.copytree(canal / "example", canal / "later")
    result = import_canal(canal, out)
    assert list(result.destinations) == ["later"]
    assert "example: " in " ".join(result.notes)
    assert (out / "destinations" / "example" / "instance.yaml").read_bytes() == before


def test_generated_ids_avoid_destinations_already_in_out(tmp_path: Path) -> None:
    out = tmp_path / "conf"
    existing = out / "destinations" / "shop" / "instance.yaml"
    existing.parent.mkdir(parents=True)
    existing.write_text("source: {user: cdc, password_env: CDC_SHOP_PASSWORD, server_id: 1001}\n")
    result = import_canal(shipped(tmp_path), out)
    assert result.destinations["example"]["source"]["server_id"] == 1002
