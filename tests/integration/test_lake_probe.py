"""The lake check races writers on a real S3-compatible server (SeaweedFS) and runs before
every writer takes its lease: the streaming run, the snapshot CLI, reconcile's own repair."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from deltalake import DeltaTable

from cdc_platform.cli import main
from cdc_platform.config.instance import InstanceConfig
from cdc_platform.config.lake import LakeLocation
from cdc_platform.config.source import SourceConfig
from cdc_platform.coordination.lease import take_lease
from cdc_platform.errors import LakeAccessError
from cdc_platform.sink.lake_check import PROBE_PARTS, SIDE_PROBE_PARTS, check_lake
from cdc_platform.sink.term import WriteTerm
from cdc_platform.testing.destinations import PASSWORD_ENV, sqlite_lease, write_conf
from cdc_platform.testing.fakes import InMemoryLease, InMemoryLeaseStore
from tests.conftest import MariaDBDatabase, S3Lake

pytestmark = pytest.mark.integration

CONFIG = InstanceConfig(
    source=SourceConfig(user="cdc", password_env="CDC_TEST_PASSWORD", server_id=7)
)


def _lake(uri: str, tmp_path: Path, **options: str) -> LakeLocation:
    return LakeLocation.resolve(uri, tmp_path, options, os.environ)


def test_the_check_races_two_commits_and_two_side_file_writes(
    s3_lake: S3Lake, tmp_path: Path
) -> None:
    """Each check lands exactly one commit of the stale pair and one of the racing pair, and
    leaves no side-file probe behind (its race had one winner, then it was removed)."""
    lake = _lake(s3_lake.uri, tmp_path)
    check_lake(lake)
    probe = DeltaTable(lake.join(*PROBE_PARTS), storage_options=lake.delta_options())
    first = probe.version()
    check_lake(lake)
    probe.update_incremental()
    assert probe.version() == first + 2
    side_prefix = f"{s3_lake.bucket}/{s3_lake.prefix}/{'/'.join(SIDE_PROBE_PARTS)}/"
    assert not [key for key in list(s3_lake.keys()) if key.startswith(side_prefix)]


def test_every_writer_checks_the_lake_before_its_lease(s3_lake: S3Lake, tmp_path: Path) -> None:
    """``take_lease`` (the one way the snapshot CLI, the repair and the supervisor take a
    lease) refuses an unsafe store before acquiring anything."""
    lake = _lake(s3_lake.uri, tmp_path, aws_conditional_put="disabled")
    lease = InMemoryLease(InMemoryLeaseStore(), "d", address="a")
    with pytest.raises(LakeAccessError, match="aws_conditional_put"):
        take_lease(lease, WriteTerm.in_lake("d", CONFIG, lake), timeout=1.0)
    assert lease.holder() is None, "no lease taken"
    safe = _lake(s3_lake.uri, tmp_path)
    held = take_lease(lease, WriteTerm.in_lake("d", CONFIG, safe), timeout=5.0)
    assert held is not None
    assert held.epoch == 0


def test_the_snapshot_cli_refuses_an_unsafe_store(
    mariadb: MariaDBDatabase,
    s3_lake: S3Lake,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv(PASSWORD_ENV, mariadb.user.password)
    conf = tmp_path / "conf"
    write_conf(
        conf,
        destination="d",
        server=mariadb.server,
        user=mariadb.user,
        database=mariadb.name,
        lake_root=s3_lake.uri,
        extra_platform=(
            "lake_storage_options: {aws_conditional_put: disabled}\n"
            + sqlite_lease(tmp_path, single_machine=True)
        ),
    )
    code = main(["snapshot", "--conf", str(conf), "--destination", "d", "--lease-timeout", "5"])
    assert code != 0
    err = capsys.readouterr().err
    assert "does not make commits atomic" in err or "conditional put" in err
    assert "aws_conditional_put" in err
    assert not [key for key in list(s3_lake.keys()) if "/d/" in key], "nothing written for d"
