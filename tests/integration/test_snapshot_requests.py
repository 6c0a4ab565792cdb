"""Ad-hoc snapshots while the destination streams: requested from the CLI and from the Dagster
job, served by the running node between batches, without stopping its run."""

from __future__ import annotations

import contextlib
import io
import threading
from pathlib import Path

import pytest

from cdc_platform.backfill import request_folder
from cdc_platform.backfill.request_inbox import snapshot_inbox
from cdc_platform.backfill.snapshot import SnapshotProgress
from cdc_platform.cli import main
from cdc_platform.config import load_config
from cdc_platform.errors import SnapshotError
from cdc_platform.runtime.supervised import supervised_destination
from cdc_platform.runtime.supervisor import LeaseSupervisor
from cdc_platform.sink.destination_lake import DestinationLake
from cdc_platform.testing.destinations import PASSWORD_ENV, sqlite_lease, write_conf
from cdc_platform.testing.processes import wait_for
from cdc_platform.testing.replay import has_commits, replay
from cdc_platform.testing.workload import Workload, source_rows
from dagster_defs.resources import PlatformResource
from dagster_defs.snapshot_request import snapshot_request_job
from tests.conftest import MariaDBDatabase

pytestmark = pytest.mark.integration


def test_ad_hoc_snapshots_while_streaming(
    mariadb: MariaDBDatabase, lake_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(PASSWORD_ENV, mariadb.user.password)
    db = mariadb.name
    workload = Workload(mariadb.server, db, seed=21)
    workload.create_schema()
    workload.run_transactions(400)  # rows the destination's start (latest) does not see
    conf = tmp_path / "conf"
    write_conf(
        conf, destination="d", server=mariadb.server, user=mariadb.user, database=db,
        lake_root=lake_root, server_id=2501,
        extra_platform=sqlite_lease(tmp_path),
        extra_store="snapshot: {chunk_size: 100}\n",
    )  # fmt: skip
    loaded = load_config(conf)
    assert not loaded.errors, loaded.errors
    uri = str(lake_root / "d" / "changes")
    inbox = snapshot_inbox(
        DestinationLake.at(lake_root, "d"), loaded.destinations["d"].config.source
    )
    with pytest.raises(SnapshotError, match="not captured"):
        inbox.submit(["other.table"])

    with supervised_destination(loaded, loaded.destinations["d"]) as supervisor:
        runner = threading.Thread(
            target=lambda: supervisor.run(exit_when_idle_seconds=2.0), daemon=True
        )
        workload.start(rate_per_second=80)
        runner.start()
        try:
            wait_for(lambda: has_commits(uri), "the run's first commit")
            before = replay(uri).tables
            assert len(before.get(f"{db}.customers", {})) < 400  # only what streamed so far

            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                code = main(
                    ["snapshot", "--conf", str(conf), "--destination", "d",
                     "--table", f"{db}.customers", "--request", "--wait", "60"]
                )  # fmt: skip
            assert code == 0, out.getvalue()
            assert f"{db}.customers" in out.getvalue()
            assert "done" in out.getvalue()

            result = snapshot_request_job.execute_in_process(
                run_config={
                    "ops": {
                        "request_snapshot": {
                            "config": {"destination": "d", "tables": [f"{db}.orders"]}
                        }
                    }
                },
                resources={"platform": PlatformResource(conf_dir=str(conf))},
            )
            assert result.success
            assert supervisor.runtime is not None or runner.is_alive()  # the run goes on
        finally:
            workload.stop()
        runner.join(timeout=60)
        assert not runner.is_alive()
    assert workload.stats.committed > 0
    replayed = replay(uri)
    assert replayed.duplicates == []
    for table in ("customers", "orders"):
        assert replayed.tables.get(f"{db}.{table}", {}) == source_rows(mariadb.server, db, table)
    assert not inbox.pending()


def test_a_request_interrupted_by_a_stop_is_finished_by_the_next_run(
    mariadb: MariaDBDatabase, lake_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(PASSWORD_ENV, mariadb.user.password)
    db = mariadb.name
    workload = Workload(mariadb.server, db, seed=22)
    workload.create_schema()
    workload.run_transactions(400)
    conf = tmp_path / "conf"
    write_conf(
        conf, destination="d", server=mariadb.server, user=mariadb.user, database=db,
        lake_root=lake_root, server_id=2502,
        extra_platform=sqlite_lease(tmp_path),
        extra_store="snapshot: {chunk_size: 50}\n",
    )  # fmt: skip
    loaded = load_config(conf)
    inbox = snapshot_inbox(
        DestinationLake.at(lake_root, "d"), loaded.destinations["d"].config.source
    )
    request_id = inbox.submit([f"{db}.customers"])
    chunks: list[int] = []
    running: list[LeaseSupervisor] = []

    def stop_after_two_chunks(progress: SnapshotProgress) -> None:
        chunks.append(progress.chunks)
        if len(chunks) == 2:
            running[0].request_stop("stopped mid-snapshot")

    with supervised_destination(
        loaded, loaded.destinations["d"], on_snapshot_progress=stop_after_two_chunks
    ) as first:
        running.append(first)
        assert first.run(exit_when_idle_seconds=30.0).error is None
    assert len(chunks) == 2
    assert inbox.pending()  # not answered: the next run finishes it
    assert inbox.result(request_id) is None
    assert DestinationLake.at(lake_root, "d").snapshot_state.exists()

    with supervised_destination(
        loaded, loaded.destinations["d"], on_snapshot_progress=lambda p: chunks.append(p.chunks)
    ) as second:
        summary = second.run(exit_when_idle_seconds=2.0)
    assert summary.error is None, summary
    answer = inbox.result(request_id)
    assert answer is not None
    assert answer.error is None
    assert chunks[2] == 3  # resumed at the third chunk, not from the start
    assert not DestinationLake.at(lake_root, "d").snapshot_state.exists()
    replayed = replay(str(lake_root / "d" / "changes"))
    assert replayed.duplicates == []
    assert replayed.tables[f"{db}.customers"] == source_rows(mariadb.server, db, "customers")


def test_a_request_claimed_by_a_holder_that_died_is_finished_by_the_next_run(
    mariadb: MariaDBDatabase, lake_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The claim of a dead holder shows no sign of life: the next run takes it over."""
    monkeypatch.setenv(PASSWORD_ENV, mariadb.user.password)
    monkeypatch.setattr(request_folder, "STALE_AFTER_SECONDS", 2.0)  # 60 s in production
    db = mariadb.name
    workload = Workload(mariadb.server, db, seed=23)
    workload.create_schema()
    workload.run_transactions(200)
    conf = tmp_path / "conf"
    write_conf(
        conf, destination="d", server=mariadb.server, user=mariadb.user, database=db,
        lake_root=lake_root, server_id=2503,
        extra_platform=sqlite_lease(tmp_path),
        extra_store="snapshot: {chunk_size: 50}\n",
    )  # fmt: skip
    loaded = load_config(conf)
    source = loaded.destinations["d"].config.source
    request_id = snapshot_inbox(DestinationLake.at(lake_root, "d"), source).submit(
        [f"{db}.customers"]
    )
    dead_holder = snapshot_inbox(DestinationLake.at(lake_root, "d"), source)
    claimed = dead_holder.claim()  # ... and that holder dies before its first chunk
    assert claimed is not None
    assert not snapshot_inbox(DestinationLake.at(lake_root, "d"), source).waiting()

    with supervised_destination(loaded, loaded.destinations["d"]) as supervisor:
        summary = supervisor.run(exit_when_idle_seconds=10.0)
    assert summary.error is None, summary
    answer = snapshot_inbox(DestinationLake.at(lake_root, "d"), source).result(request_id)
    assert answer is not None, "the stale claim was taken over and answered"
    assert answer.error is None
    assert answer.rows[f"{db}.customers"] > 0
    assert not dead_holder.claimed.list(".json")
    replayed = replay(str(lake_root / "d" / "changes"))
    assert replayed.duplicates == []
    assert replayed.tables[f"{db}.customers"] == source_rows(mariadb.server, db, "customers")
