"""The lake location: local paths and s3:// URIs, joined without Path arithmetic; options."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cdc_platform.cli import main
from cdc_platform.config import load_config
from cdc_platform.config.deployment import deployment_warnings
from cdc_platform.config.lake import LakeLocation
from cdc_platform.errors import ConfigError, ConfigFileError
from cdc_platform.runtime.supervised import supervised_destination
from cdc_platform.sink.destination_lake import DestinationLake

pytestmark = pytest.mark.unit


def test_s3_root_is_a_uri_not_a_relative_directory(tmp_path: Path) -> None:
    lake = LakeLocation.resolve("s3://lake/prefix/", tmp_path, environ={})
    assert lake.is_remote
    assert lake.uri == "s3://lake/prefix"
    assert lake.join("shop", "changes") == "s3://lake/prefix/shop/changes"
    assert lake.join("_cdc/probe") == "s3://lake/prefix/_cdc/probe"


def test_s3_gets_conditional_puts_by_default(tmp_path: Path) -> None:
    lake = LakeLocation.resolve("s3://lake/p", tmp_path, {"aws_region": "eu-west-1"}, {})
    assert lake.storage_options == {"aws_region": "eu-west-1", "aws_conditional_put": "etag"}


@pytest.mark.parametrize(
    ("options", "environ"),
    [
        ({"aws_s3_locking_provider": "dynamodb"}, {}),
        ({"AWS_S3_LOCKING_PROVIDER": "dynamodb"}, {}),
        ({}, {"AWS_S3_LOCKING_PROVIDER": "dynamodb"}),
        ({"AWS_CONDITIONAL_PUT": "etag"}, {}),
    ],
)
def test_a_configured_locking_provider_or_choice_is_kept(
    tmp_path: Path, options: dict[str, str], environ: dict[str, str]
) -> None:
    lake = LakeLocation.resolve("s3://lake/p", tmp_path, options, environ)
    assert lake.storage_options == options


def test_local_paths_keep_working(tmp_path: Path) -> None:
    relative = LakeLocation.resolve("var/lake", tmp_path, environ={})
    assert not relative.is_remote
    assert relative.local_path() == tmp_path / "var" / "lake"
    assert relative.join("shop", "changes") == str(tmp_path / "var" / "lake" / "shop" / "changes")
    absolute = LakeLocation.resolve("/srv/lake", tmp_path, environ={})
    assert absolute.uri == "/srv/lake"
    assert absolute.storage_options == {}
    assert absolute.delta_options() is None
    assert LakeLocation.resolve("file:///srv/lake", tmp_path, environ={}).uri == "/srv/lake"


def test_local_path_of_a_remote_lake_says_not_yet_on_object_storage(tmp_path: Path) -> None:
    lake = LakeLocation.resolve("s3://lake/p", tmp_path, environ={})
    with pytest.raises(ConfigError, match=r"s3://lake/p.*not yet on object storage"):
        lake.local_path()


def test_join_refuses_parent_references(tmp_path: Path) -> None:
    lake = LakeLocation.resolve("s3://lake/p", tmp_path, environ={})
    with pytest.raises(ValueError, match="plain relative"):
        lake.join("..", "other")


@pytest.mark.parametrize("root", ["gs://lake/p", "ftp://host/lake", "az://c/p", "s3:///p"])
def test_unsupported_roots_are_refused_naming_the_uri(tmp_path: Path, root: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(root)):
        LakeLocation.resolve(root, tmp_path, environ={})


def test_platform_file_refuses_a_bad_scheme_naming_file_and_key(tmp_path: Path) -> None:
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "platform.yaml").write_text("lake_root: ftp://host/lake\n")
    with pytest.raises(ConfigFileError) as caught:
        load_config(conf)
    assert caught.value.key == "lake_root"
    assert "ftp://host/lake" in str(caught.value)
    assert "not supported" in str(caught.value)


@pytest.mark.parametrize(
    "key", ["AWS_SECRET_ACCESS_KEY", "aws_access_key_id", "AWS_SESSION_TOKEN", "password"]
)
def test_platform_file_refuses_secret_storage_options(tmp_path: Path, key: str) -> None:
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "platform.yaml").write_text(
        f"lake_root: s3://lake/p\nlake_storage_options:\n  {key}: x\n"
    )
    with pytest.raises(ConfigFileError) as caught:
        load_config(conf)
    assert "secrets never go in files" in str(caught.value)
    assert caught.value.key == "lake_storage_options"


def test_configset_builds_table_uris_in_the_bucket(tmp_path: Path) -> None:
    conf = tmp_path / "conf"
    (conf / "destinations" / "shop").mkdir(parents=True)
    (conf / "platform.yaml").write_text(
        "lake_root: s3://lake/prod\nlake_storage_options: {aws_region: us-east-1}\n"
    )
    (conf / "destinations" / "shop" / "instance.yaml").write_text(
        "source: {host: h, port: 3306, user: u, password_env: PW, server_id: 7}\n"
    )
    config = load_config(conf, environ={"PW": "x"})
    assert DestinationLake.of(config, "shop").change_log == "s3://lake/prod/shop/changes"
    assert config.lake.storage_options["aws_conditional_put"] == "etag"
    with pytest.raises(ConfigError, match="not yet on object storage"):
        _ = config.lake_root


@pytest.mark.parametrize(
    ("platform", "expected"),
    [
        ("lake_root: var/lake\n", []),
        (
            "lake_root: s3://lake/p\nlease: {backend: database, single_machine: true}\n",
            [],
        ),
        (
            "lake_root: s3://lake/p\nlease: {backend: zookeeper, hosts: 'zk:2181'}\n"
            "watch: {url: 'sqlite:///var/state.db'}\n",
            ["state watch is the local SQLite file"],
        ),
        (
            "lake_root: s3://lake/p\n"
            "lease: {backend: database, url: 'postgresql://cdc@db:5432/leases'}\n",
            [],
        ),
    ],
)
def test_config_check_warns_when_the_lake_is_shared_but_the_state_watch_is_not(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    platform: str,
    expected: list[str],
) -> None:
    conf = tmp_path / "conf"
    (conf / "destinations" / "shop").mkdir(parents=True)
    (conf / "destinations" / "shop" / "instance.yaml").write_text(
        "source: {user: cdc, password_env: PATH, server_id: 1001}\n"
    )
    (conf / "platform.yaml").write_text(platform)
    warnings = deployment_warnings(load_config(conf))
    assert len(warnings) == len(expected)
    for warning, text in zip(warnings, expected, strict=True):
        assert text in warning
    assert main(["config", "check", "--conf", str(conf)]) == 0  # a warning, not an error
    printed = capsys.readouterr().out
    assert printed.count("warning: ") == len(expected)


@pytest.mark.parametrize("command", ["run", "serve", "snapshot", "dagster", "config check"])
def test_a_local_sqlite_lease_with_a_lake_on_object_storage_is_refused(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    command: str,
) -> None:
    """Two machines would each take their own lease and write the same change log. The S3
    endpoint does not exist: the refusal comes before anything is opened."""
    conf = tmp_path / "conf"
    (conf / "destinations" / "shop").mkdir(parents=True)
    (conf / "platform.yaml").write_text("lake_root: s3://lake/p\n")
    (conf / "destinations" / "shop" / "instance.yaml").write_text(
        "source: {host: h, port: 3306, user: u, password_env: PW, server_id: 7}\n"
    )
    monkeypatch.setenv("PW", "x")
    expected = "lease.single_machine: true"
    if command == "dagster":  # the Dagster run wires its destination through this
        config = load_config(conf)
        with (
            pytest.raises(ConfigError, match=expected),
            supervised_destination(config, config.destinations["shop"]),
        ):
            pass
        return
    argv = {
        "run": ["run", "--conf", str(conf), "--destination", "shop"],
        "serve": ["serve", "--conf", str(conf)],
        "snapshot": ["snapshot", "--conf", str(conf), "--destination", "shop"],
        "config check": ["config", "check", "--conf", str(conf)],
    }[command]
    code = main(argv)
    printed = capsys.readouterr()
    assert code != 0
    assert expected in printed.out + printed.err
    assert not (tmp_path / "var").exists(), "no lease file, nothing opened"


@pytest.mark.parametrize(
    "root",
    [
        "s3://AKIAKEY:Sup3r-Secret@lake/prod",
        "s3://AKIAKEY:Sup3r-Secret@/prod",  # and no bucket: still no echo of the secret
        "s3://lake/prod?aws_secret_access_key=Sup3r-Secret",
        "s3://lake/prod?token=Sup3r-Secret",
    ],
)
def test_a_lake_root_with_credentials_is_refused_without_the_secret(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], root: str
) -> None:
    with pytest.raises(ConfigError) as direct:
        LakeLocation.resolve(root, tmp_path, environ={})
    assert "Sup3r-Secret" not in str(direct.value)
    assert "environment" in str(direct.value)
    conf = tmp_path / "conf"
    (conf / "destinations").mkdir(parents=True, exist_ok=True)
    (conf / "platform.yaml").write_text(f"lake_root: '{root}'\n")
    with pytest.raises(ConfigFileError) as caught:
        load_config(conf)
    assert caught.value.key == "lake_root"
    assert "Sup3r-Secret" not in str(caught.value)
    assert main(["config", "check", "--conf", str(conf)]) != 0
    printed = capsys.readouterr()
    assert "Sup3r-Secret" not in printed.out + printed.err


def test_a_lake_root_with_a_user_only_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="credentials"):
        LakeLocation.resolve("s3://AKIAKEY@lake/prod", tmp_path, environ={})
