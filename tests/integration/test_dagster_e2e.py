"""End to end with a real Dagster daemon, a real MariaDB and real Delta tables.

Add a destination directory -> a run starts and rows arrive; edit it -> the old run is
cancelled and a new one continues; kill -9 the run worker -> a new run takes over from the
checkpoint; delete it -> the run is cancelled. The change log then replays to the source.
SIGTERM to the run worker is a stop (no alert), kill -9 a failure (alerted once). A requested
stop (Terminate, a reload, Ctrl-C) ends the run SUCCESS with no step failure: Dagster's UI draws
CANCELED in the red of a failure.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import time
from pathlib import Path

import pytest
from dagster import (
    AssetKey,
    DagsterEventType,
    DagsterInstance,
    DagsterRun,
    DagsterRunStatus,
)

from cdc_platform.testing.replay import has_commits, replay
from cdc_platform.testing.workload import Workload, source_rows
from dagster_defs.alerts import ALERTED_TAG, WEBHOOK_ENV
from dagster_defs.cdc_job import METRICS_TAG, PID_TAG, STOPPED_TAG
from tests.conftest import MariaDBDatabase
from tests.integration.dagster_daemon import (
    FINISHED,
    Daemon,
    change_rows,
    committed_rows,
    finished_ticks,
    runs_of,
    stage_destination,
    started_run,
    status,
    wait_for,
)
from tests.integration.test_dagster_alerts import Webhook

pytestmark = pytest.mark.integration


def failure_events(instance: DagsterInstance, run_id: str) -> list[str]:
    """The run's step or run failures and its ERROR-level lines (what the UI shows red)."""
    failures = (DagsterEventType.STEP_FAILURE, DagsterEventType.RUN_FAILURE)
    return [
        f"{entry.dagster_event_type or 'log'}: {entry.message[:200]}"
        for entry in instance.all_logs(run_id)
        if entry.dagster_event_type in failures or entry.level >= logging.ERROR
    ]


def test_a_requested_stop_ends_quietly(
    daemon: tuple[DagsterInstance, Path], mariadb: MariaDBDatabase, tmp_path: Path
) -> None:
    """Terminate (as the UI and a reload do) and Ctrl-C (SIGINT to the run worker) finish the
    in-flight commit and end the run SUCCESS, with no STEP_FAILURE and nothing at ERROR;
    before, each logged a STEP_FAILURE with DagsterExecutionInterruptedError and the run
    ended CANCELED, drawn red on the Runs page and the timeline (issue 44.2)."""
    instance, conf = daemon
    name = "quiet"
    workload = Workload(mariadb.server, mariadb.name, seed=13)
    workload.create_schema()
    staged = stage_destination(conf, name, mariadb, tmp_path / "lake")
    uri = str(tmp_path / "lake" / name / "changes")
    shutil.copytree(staged, conf / "destinations" / name)
    first = wait_for("first run STARTED", lambda: started_run(instance, name, set()))
    assert isinstance(first, DagsterRun)
    wait_for("change log created", lambda: has_commits(uri))
    workload.start(rate_per_second=10)
    try:
        wait_for("rows in the change log", lambda: change_rows(uri) > 0)
        instance.run_coordinator.cancel_run(first.run_id)  # the UI's Terminate
        ended = wait_for(
            "terminated run finished",
            lambda: status(instance, first.run_id) in FINISHED and status(instance, first.run_id),
        )
        assert ended == DagsterRunStatus.SUCCESS
        assert failure_events(instance, first.run_id) == []

        second = wait_for(
            "second run STARTED", lambda: started_run(instance, name, {first.run_id}), timeout=240
        )
        assert isinstance(second, DagsterRun)
        before = change_rows(uri)
        wait_for("rows from the second run", lambda: change_rows(uri) > before)
        os.kill(int(second.tags[PID_TAG]), signal.SIGINT)  # Ctrl-C
        ended = wait_for(
            "interrupted run finished",
            lambda: status(instance, second.run_id) in FINISHED and status(instance, second.run_id),
        )
        assert ended == DagsterRunStatus.SUCCESS
        assert failure_events(instance, second.run_id) == []
        stopped = instance.get_run_by_id(second.run_id)
        assert stopped is not None
        assert stopped.tags.get(STOPPED_TAG) == "requested"
    finally:
        workload.stop()
    result = replay(uri)
    assert not result.duplicates
    assert not result.seq_gaps
    shutil.rmtree(conf / "destinations" / name)


def test_destination_lifecycle_under_a_real_daemon(
    daemon: tuple[DagsterInstance, Path], mariadb: MariaDBDatabase, tmp_path: Path
) -> None:
    instance, conf = daemon
    name = "e2e"
    workload = Workload(mariadb.server, mariadb.name, seed=5)
    workload.create_schema()
    staged = stage_destination(conf, name, mariadb, tmp_path / "lake")
    uri = str(tmp_path / "lake" / name / "changes")

    # Add the directory: a run starts and changes arrive.
    shutil.copytree(staged, conf / "destinations" / name)
    first = wait_for("first run STARTED", lambda: started_run(instance, name, set()))
    assert isinstance(first, DagsterRun)
    wait_for("change log created", lambda: has_commits(uri))
    workload.run_transactions(30)
    wait_for("rows in the change log", lambda: change_rows(uri) > 0)
    # The run's Prometheus endpoint is in its tags and counts what it committed.
    run = instance.get_run_by_id(first.run_id)
    assert run is not None
    url = run.tags[METRICS_TAG]
    wait_for("committed rows in the run's metrics", lambda: committed_rows(url, name) > 0)

    # Edit it: the old run is cancelled, a new one continues from the checkpoint.
    path = conf / "destinations" / name / "instance.yaml"
    path.write_text(path.read_text().replace("batch_size: 64", "batch_size: 32"))
    ended = wait_for(
        "old run ended",
        lambda: status(instance, first.run_id) in FINISHED and status(instance, first.run_id),
    )
    assert ended == DagsterRunStatus.SUCCESS, failure_events(instance, first.run_id)
    second = wait_for("second run STARTED", lambda: started_run(instance, name, {first.run_id}))
    assert isinstance(second, DagsterRun)
    before = change_rows(uri)
    workload.run_transactions(30)
    wait_for("rows after the reload", lambda: change_rows(uri) > before)

    # kill -9 the run worker: the run fails and a new run takes over.
    os.kill(int(second.tags[PID_TAG]), signal.SIGKILL)
    wait_for(
        "killed run FAILURE", lambda: status(instance, second.run_id) == DagsterRunStatus.FAILURE
    )
    third = wait_for(
        "third run STARTED", lambda: started_run(instance, name, {first.run_id, second.run_id})
    )
    assert isinstance(third, DagsterRun)
    before = change_rows(uri)
    workload.run_transactions(30)
    wait_for("rows after the takeover", lambda: change_rows(uri) > before)
    expected = {t: source_rows(mariadb.server, mariadb.name, t) for t in ("customers", "orders")}

    def caught_up() -> bool:
        result = replay(uri)
        return all(
            result.tables.get(f"{mariadb.name}.{t}", {}) == rows for t, rows in expected.items()
        )

    wait_for("change log caught up with the source", caught_up)

    # Delete it: the run is cancelled and no new one starts.
    shutil.rmtree(conf / "destinations" / name)
    ended = wait_for(
        "run ended after delete",
        lambda: status(instance, third.run_id) in FINISHED and status(instance, third.run_id),
    )
    assert ended == DagsterRunStatus.SUCCESS, failure_events(instance, third.run_id)
    # A config_monitor tick that began after the cancel saw the directory gone; had it asked
    # for a run, the run would exist by the time the tick is marked done.
    cancelled_at = time.time()
    wait_for(
        "a config_monitor tick after the delete",
        lambda: finished_ticks(instance, "config_monitor", after=cancelled_at) > 0,
    )
    live = [r for r in runs_of(instance, name) if not r.is_finished]
    assert live == [], f"runs still live after the destination was removed: {live}"

    result = replay(uri)
    assert not result.duplicates
    assert not result.seq_gaps
    assert not result.problems
    materializations = instance.fetch_materializations(
        records_filter=AssetKey(["cdc", name, "changes"]), limit=1000
    ).records
    assert materializations, "committed batches must show up as materializations"
    metadata = materializations[0].asset_materialization.metadata
    assert metadata["rows_per_second"].value >= 0  # charted beside lag_seconds
    assert "lag_seconds" in metadata


def test_a_sigterm_to_the_run_worker_is_a_stop_not_a_failure(
    dagster_daemon: Daemon, mariadb: MariaDBDatabase, tmp_path: Path
) -> None:
    """SIGTERM straight to the live run's worker (an operator's kill, a host shutdown): the
    in-flight commit finishes and the run ends SUCCESS, not FAILURE, and nothing is alerted;
    a kill -9 of the next run is a real failure and is alerted, once."""
    hook = Webhook()
    dagster_daemon.env[WEBHOOK_ENV] = hook.url
    instance = dagster_daemon.start()
    conf = dagster_daemon.conf
    name = "sig"
    workload = Workload(mariadb.server, mariadb.name, seed=7)
    workload.create_schema()
    staged = stage_destination(conf, name, mariadb, tmp_path / "lake")
    uri = str(tmp_path / "lake" / name / "changes")
    try:
        shutil.copytree(staged, conf / "destinations" / name)
        first = wait_for("first run STARTED", lambda: started_run(instance, name, set()))
        assert isinstance(first, DagsterRun)
        wait_for("change log created", lambda: has_commits(uri))
        workload.run_transactions(20)
        wait_for("rows in the change log", lambda: change_rows(uri) > 0)

        os.kill(int(first.tags[PID_TAG]), signal.SIGTERM)
        ended = wait_for(
            "SIGTERMed run finished",
            lambda: status(instance, first.run_id) in FINISHED and status(instance, first.run_id),
        )
        assert ended == DagsterRunStatus.SUCCESS
        assert failure_events(instance, first.run_id) == []

        # The monitors start the destination again; a kill -9 of that run is a failure.
        second = wait_for(
            "second run STARTED",
            lambda: started_run(instance, name, {first.run_id}),
            timeout=240,  # running_monitor waits two of its intervals first
        )
        assert isinstance(second, DagsterRun)
        os.kill(int(second.tags[PID_TAG]), signal.SIGKILL)
        wait_for(
            "killed run FAILURE",
            lambda: status(instance, second.run_id) == DagsterRunStatus.FAILURE,
        )
        wait_for("the failure posted", lambda: hook.received, timeout=180)
        posted_at = time.time()
        # Two alert-sensor evaluations after the post have seen both runs ended.
        wait_for(
            "two cdc_run_failure_alert ticks after the post",
            lambda: finished_ticks(instance, "cdc_run_failure_alert", after=posted_at) >= 2,
            timeout=180,
        )
        assert [p["run_id"] for p in hook.received] == [second.run_id]
        stopped = instance.get_run_by_id(first.run_id)
        assert stopped is not None
        assert ALERTED_TAG not in stopped.tags
        result = replay(uri)
        assert not result.duplicates
        assert not result.seq_gaps
    finally:
        hook.close()
