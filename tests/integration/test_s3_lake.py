"""The lake on S3 (a private SeaweedFS): streaming, kill -9, failover, fencing, bad input.

Only the standard AWS environment variables point the platform at the server (the `s3_lake`
fixture sets them); the config holds nothing but ``lake_root: s3://...``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from deltalake import DeltaTable

from cdc_platform.cli import main
from cdc_platform.config import load_config
from cdc_platform.config.lake import LakeLocation
from cdc_platform.errors import LakeAccessError
from cdc_platform.sink import CommitResult, DeltaChangeLog, FencedCommitError, MaintenancePolicy
from cdc_platform.sink.destination_lake import DestinationLake
from cdc_platform.sink.lake_check import check_lake
from cdc_platform.testing.crash import kill_cycle
from cdc_platform.testing.destinations import PASSWORD_ENV, write_conf
from cdc_platform.testing.ha import Cluster, commit_history, fast_zookeeper_lease
from cdc_platform.testing.replay import replay
from cdc_platform.testing.seaweedfs import SEAWEED_READONLY_ACCESS_KEY, SEAWEED_READONLY_SECRET_KEY
from cdc_platform.testing.workload import Workload, source_rows
from tests.conftest import MariaDBDatabase, S3Lake
from tests.integration.test_delta_sink import Binlog, race, resume_of
from tests.integration.test_ha_failover import finish, start_active_and_standby

pytestmark = pytest.mark.integration


ONE_MACHINE = "lease: {backend: database, single_machine: true}\n"
"""The default SQLite lease, accepted with the S3 lake: these tests run on one machine."""


def _conf(
    mariadb: MariaDBDatabase, tmp_path: Path, lake_root: str, platform: str = ONE_MACHINE
) -> Path:
    conf = tmp_path / "conf"
    write_conf(
        conf,
        destination="s3d",
        server=mariadb.server,
        user=mariadb.user,
        database=mariadb.name,
        lake_root=lake_root,
        extra_platform=platform,
    )
    return conf


def _run(conf: Path) -> int:
    return main(["run", "--conf", str(conf), "--destination", "s3d", "--exit-when-idle", "2"])


def test_cli_run_streams_a_workload_into_s3_and_replays_to_the_source(
    mariadb: MariaDBDatabase,
    s3_lake: S3Lake,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(PASSWORD_ENV, mariadb.user.password)
    conf = _conf(mariadb, tmp_path, s3_lake.uri)
    workload = Workload(mariadb.server, mariadb.name, seed=5)
    workload.create_schema()
    assert _run(conf) == 0  # pins the start position
    workload.run_transactions(60)
    assert _run(conf) == 0
    config = load_config(conf)
    uri = DestinationLake.of(config, "s3d").change_log
    assert uri == f"{s3_lake.uri}/s3d/changes"
    result = replay(uri)
    assert result.rows > 0
    assert not result.duplicates
    assert not result.seq_gaps
    assert not result.problems
    for table in ("customers", "orders"):
        expected = source_rows(mariadb.server, mariadb.name, table)
        assert result.tables.get(f"{mariadb.name}.{table}", {}) == expected
    keys = s3_lake.keys()
    assert any("/s3d/changes/_delta_log/" in key for key in keys)
    assert any("/_cdc/probe/_delta_log/" in key for key in keys)
    local = sorted(p.name for p in (tmp_path / "var").iterdir())
    assert local == ["lease.db"], "only the (default SQLite) lease is local, no lake file"
    assert not list(tmp_path.glob("**/s3:*")), "s3:// must not become a local directory"


def test_kill_nine_on_s3_loses_and_duplicates_nothing(
    mariadb: MariaDBDatabase, s3_lake: S3Lake, tmp_path: Path
) -> None:
    report = kill_cycle(
        mariadb.server,
        mariadb.user,
        mariadb.name,
        tmp_path,
        kills=2,
        seed=13,
        min_alive=1.0,
        max_alive=3.0,
        lake_root=s3_lake.uri,
    )
    detail = "\n".join(report.logs[-40:])
    assert report.kills == 2
    assert report.replay is not None
    assert report.replay.rows > 0, detail
    assert not report.replay.duplicates, f"{report.replay.duplicates[:5]}\n{detail}"
    assert not report.replay.seq_gaps, report.replay.seq_gaps[:5]
    assert not report.replay.problems, report.replay.problems[:5]
    assert not report.mismatches, f"{report.mismatches}\n{detail}"


def _sink(lake: LakeLocation, table: str = "fence") -> DeltaChangeLog:
    return DeltaChangeLog(
        lake.join(table, "changes"),
        "fence",
        storage_options=lake.delta_options(),
        maintenance=MaintenancePolicy.disabled(),
    )


def test_stale_epoch_and_racing_commits_are_refused_on_s3(
    s3_lake: S3Lake, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    lake = LakeLocation.resolve(s3_lake.uri, tmp_path, environ=os.environ)
    assert lake.storage_options == {"aws_conditional_put": "etag"}
    binlog = Binlog()
    old_writer, new_writer = _sink(lake), _sink(lake)
    events = binlog.rows(1)
    old_writer.commit(events, batch_seq=1, resume=resume_of(events), epoch=1)
    assert new_writer.recover() is not None
    events = binlog.rows(1)
    new_writer.commit(events, batch_seq=2, resume=resume_of(events), epoch=2)
    stale = binlog.rows(1)
    with pytest.raises(FencedCommitError) as refused:
        old_writer.commit(stale, batch_seq=3, resume=resume_of(stale), epoch=1)
    assert (refused.value.epoch, refused.value.table_epoch) == (1, 2)
    # Two writers opened at the same version race the same batch: exactly one lands.
    events = binlog.rows(1)
    _sink(lake, "race").commit(events, batch_seq=1, resume=resume_of(events), epoch=1)
    for batch in range(2, 8):
        writers = [_sink(lake, "race"), _sink(lake, "race")]
        for writer in writers:
            assert writer.recover() is not None
        outcomes = race(writers, [binlog.rows(5), binlog.rows(5)], batch)
        assert len([o for o in outcomes if isinstance(o, CommitResult)]) == 1, outcomes
        assert len([o for o in outcomes if isinstance(o, FencedCommitError)]) == 1, outcomes
    # At least one race collided inside delta-rs: the store refused the second put of a
    # version (conditional put), and the loser re-checked the fencing.
    assert any("lost a commit race" in r.getMessage() for r in caplog.records)
    table = DeltaTable(lake.join("race", "changes"))
    seqs = sorted(int(s) for s in table.to_pyarrow_table().column("seq").to_pylist())
    assert seqs == list(range(1, len(seqs) + 1))


def _lake(uri: str, tmp_path: Path, **options: str) -> LakeLocation:
    return LakeLocation.resolve(uri, tmp_path, options, os.environ)


def test_unreachable_endpoint_is_named_at_start(
    s3_lake: S3Lake, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    endpoint = s3_lake.server.unused_endpoint()
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    with pytest.raises(LakeAccessError) as caught:
        check_lake(_lake(s3_lake.uri, tmp_path))
    message = str(caught.value)
    assert s3_lake.uri in message
    assert "cannot be reached" in message
    assert endpoint in message
    assert caught.value.transient


def test_wrong_credentials_are_named_at_start(
    s3_lake: S3Lake, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong-secret-value")
    with pytest.raises(LakeAccessError) as caught:
        check_lake(_lake(s3_lake.uri, tmp_path))
    message = str(caught.value)
    assert s3_lake.uri in message
    assert "refused the credentials" in message
    assert "AWS_SECRET_ACCESS_KEY" in message
    assert "wrong-secret-value" not in message
    assert not caught.value.transient
    assert s3_lake.keys() == [], "nothing written"


def test_no_write_permission_is_named_at_start(
    s3_lake: S3Lake, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", SEAWEED_READONLY_ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SEAWEED_READONLY_SECRET_KEY)
    with pytest.raises(LakeAccessError) as caught:
        check_lake(_lake(s3_lake.uri, tmp_path))
    message = str(caught.value)
    assert s3_lake.uri in message
    assert "access denied" in message
    assert not caught.value.transient
    assert s3_lake.keys() == [], "nothing half-written"


def test_missing_bucket_is_named_at_start(s3_lake: S3Lake, tmp_path: Path) -> None:
    uri = "s3://no-such-bucket-cdc/prefix"
    with pytest.raises(LakeAccessError) as caught:
        check_lake(_lake(uri, tmp_path))
    assert uri in str(caught.value)
    assert "bucket does not exist" in str(caught.value)


def test_a_store_without_atomic_commits_is_refused_naming_the_option(
    s3_lake: S3Lake, tmp_path: Path
) -> None:
    lake = _lake(s3_lake.uri, tmp_path, aws_conditional_put="disabled")
    with pytest.raises(LakeAccessError) as caught:
        check_lake(lake)
    message = str(caught.value)
    assert s3_lake.uri in message
    assert "aws_conditional_put" in message
    assert "aws_s3_locking_provider" in message


def test_cli_run_fails_at_start_with_the_cause(
    mariadb: MariaDBDatabase,
    s3_lake: S3Lake,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv(PASSWORD_ENV, mariadb.user.password)
    conf = _conf(mariadb, tmp_path, "s3://no-such-bucket-cdc/p")
    assert _run(conf) == 2
    err = capsys.readouterr().err
    assert "s3://no-such-bucket-cdc/p" in err
    assert "bucket does not exist" in err
    assert main(["config", "check", "--conf", str(conf), "--connect"]) == 1
    assert "lake: ERROR" in capsys.readouterr().out
    for bad in ("ftp://host/lake", "gs://bucket/lake"):
        conf = _conf(mariadb, tmp_path / bad.split(":")[0], bad)
        assert _run(conf) == 2
        err = capsys.readouterr().err
        assert bad in err
        assert "not supported" in err


def test_failover_on_s3_kill_nine_of_the_active_the_standby_takes_over(
    mariadb: MariaDBDatabase, s3_lake: S3Lake, zk_hosts: str, tmp_path: Path
) -> None:
    cluster = Cluster(
        tmp_path,
        mariadb.server,
        mariadb.user,
        mariadb.name,
        fast_zookeeper_lease(zk_hosts),
        lake_root=s3_lake.uri,
    )
    try:
        workload = Workload(mariadb.server, mariadb.name, seed=23)
        a, b, epoch_a = start_active_and_standby(cluster, workload)
        a.kill()
        taken = cluster.wait_holder(b, above=epoch_a)
        cluster.wait_claimed(taken.epoch)
        cluster.wait_rows_beyond(cluster.rows())
        finish(cluster, workload, b)
        assert {c.epoch for c in commit_history(cluster.uri)} >= {epoch_a, taken.epoch}
    finally:
        cluster.close()
