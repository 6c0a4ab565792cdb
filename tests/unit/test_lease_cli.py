"""Lease settings, the factory and the `status` / `release` commands on the default SQLite lease."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cdc_platform.cli import main
from cdc_platform.config import load_config
from cdc_platform.config.leases import DatabaseLeaseConfig, ZooKeeperLeaseConfig
from cdc_platform.config.platform import PlatformConfig
from cdc_platform.config.urls import parse_database_url, redact_url
from cdc_platform.coordination.factory import open_lease, open_registry, open_state_store
from cdc_platform.errors import ConfigFileError
from cdc_platform.events import ResumePosition
from cdc_platform.ha.db_lease import DatabaseLease
from cdc_platform.ha.zookeeper import ZooKeeperLease
from cdc_platform.sink import DeltaChangeLog
from cdc_platform.sink.destination_lake import DestinationLake

pytestmark = pytest.mark.unit

ENV = "CDC_TEST_LEASE_CLI_PASSWORD"


@pytest.fixture
def conf(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(ENV, "x")
    conf = tmp_path / "conf"
    (conf / "destinations" / "shop").mkdir(parents=True)
    (conf / "platform.yaml").write_text("lake_root: lake\n")
    (conf / "destinations" / "shop" / "instance.yaml").write_text(
        f"source: {{user: cdc, password_env: {ENV}, server_id: 9}}\n"
    )
    return conf


def test_default_lease_is_a_sqlite_file_next_to_the_conf_dir(conf: Path) -> None:
    config = load_config(conf)
    assert isinstance(config.platform.lease, DatabaseLeaseConfig)
    lease = open_lease(config.platform, conf, "shop", address="a")
    try:
        assert isinstance(lease, DatabaseLease)
        assert lease.db.url.path == conf.parent / "var" / "lease.db"
        assert lease.try_acquire() == 0
    finally:
        lease.close()
    assert (conf.parent / "var" / "lease.db").exists()
    registry = open_registry(config.platform, conf)
    assert registry is not None
    registry.db.close()
    store = open_state_store(config.platform, conf)
    store.close()


def test_zookeeper_settings_build_a_zookeeper_lease(conf: Path) -> None:
    (conf / "platform.yaml").write_text(
        "lease: {backend: zookeeper, hosts: '127.0.0.1:1/x', switch_delay_seconds: 2, "
        "address: 'n1'}\n"
    )
    config = load_config(conf)
    lease = open_lease(config.platform, conf, "shop")
    assert isinstance(lease, ZooKeeperLease)
    assert lease.running_path == "/cdc/destinations/shop/running"
    assert lease.switch_delay == 2
    assert lease.address == "n1"
    assert open_registry(config.platform, conf) is None


def test_renew_interval_must_fit_in_the_expiry(conf: Path) -> None:
    (conf / "platform.yaml").write_text(
        "lease: {backend: database, expiry_seconds: 2, renew_interval_seconds: 1.8}\n"
    )
    with pytest.raises(ConfigFileError) as caught:
        load_config(conf)
    assert "renew_interval_seconds" in str(caught.value)


def test_older_lease_files_still_load() -> None:
    old = PlatformConfig.model_validate(
        {"lease": {"backend": "database", "url": "sqlite:///x.db", "expiry_seconds": 5}}
    )
    assert isinstance(old.lease, DatabaseLeaseConfig)
    assert old.lease.table == "master_lock"
    zk = PlatformConfig.model_validate({"lease": {"backend": "zookeeper", "hosts": "h:1"}})
    assert isinstance(zk.lease, ZooKeeperLeaseConfig)
    assert zk.lease.auth() is None


def test_database_urls() -> None:
    assert parse_database_url("sqlite:////abs/l.db").path == Path("/abs/l.db")
    assert parse_database_url("sqlite:///rel/l.db", Path("/base")).path == Path("/base/rel/l.db")
    url = parse_database_url("mariadb://cdc@db.example:3307/leases")
    assert (url.kind, url.host, url.port, url.user, url.database) == (
        "mysql",
        "db.example",
        3307,
        "cdc",
        "leases",
    )
    assert parse_database_url("postgres://u@h/d").kind == "postgresql"
    with pytest.raises(ValueError, match="password") as refused:
        parse_database_url("mysql://u:s3cr/t@x@h/d")
    assert "s3cr" not in str(refused.value)
    with pytest.raises(ValueError, match="password") as unknown:
        parse_database_url("myslq://u:hunter2@h/d")
    assert "hunter2" not in str(unknown.value)
    with pytest.raises(ValueError, match="scheme"):
        parse_database_url("oracle://h/d")
    with pytest.raises(ValueError, match="database name"):
        parse_database_url("mysql://u@h")


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("mysql://u:pw@h/d", "mysql://u:***@h/d"),
        ("mysql://u:p/w@x@h:3306/d", "mysql://u:***@h:3306/d"),
        ("u:pw@h", "u:***@h"),
        ("sc://h:15002/;token=abc;user_id=x", "sc://h:15002/;token=***;user_id=x"),
        (
            "postgresql://h/d?password=abc&sslmode=require",
            "postgresql://h/d?password=***&sslmode=require",
        ),
        ("mysql://u@h:3306/d", "mysql://u@h:3306/d"),
        ("sc://h:15002", "sc://h:15002"),
    ],
)
def test_redact_url(text: str, shown: str) -> None:
    assert redact_url(text) == shown


def test_status_and_release_commands(conf: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", "--conf", str(conf)]) == 0
    out = capsys.readouterr().out
    assert "shop: no holder (database lease)" in out
    assert "no checkpoint yet" in out

    assert main(["release", "--conf", str(conf), "--destination", "shop"]) == 1
    assert "nobody holds the lease" in capsys.readouterr().out

    config = load_config(conf)
    holder = open_lease(config.platform, conf, "shop", address="node-1")
    try:
        assert holder.try_acquire() == 0
        DeltaChangeLog(DestinationLake.of(config, "shop").change_log, "shop").commit(
            (), batch_seq=1, resume=ResumePosition("mysql-bin.000007", 1234), epoch=0
        )
        assert main(["status", "--conf", str(conf), "--json"]) == 0
        (shown,) = json.loads(capsys.readouterr().out)
        assert shown["holder"]["address"] == "node-1"
        assert shown["holder"]["epoch"] == 0
        assert shown["batch_seq"] == 1
        assert shown["position"] == "mysql-bin.000007:1234"

        assert main(["release", "--conf", str(conf), "--destination", "shop"]) == 0
        assert "asked node-1 (epoch 0)" in capsys.readouterr().out
        holder.renew()
        assert not holder.is_held(), "the holder let go at its next renewal"
    finally:
        holder.close()
    assert main(["status", "--conf", str(conf), "--destination", "shop"]) == 0
    assert "no holder" in capsys.readouterr().out
    assert main(["status", "--conf", str(conf), "--destination", "nope"]) == 2
