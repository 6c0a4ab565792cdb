"""End to end with a real Dagster daemon, a real MariaDB and real Delta tables.

Add a destination directory -> a run starts and rows arrive; edit it -> the old run is
cancelled and a new one continues; kill -9 the run worker -> a new run takes over from the
checkpoint; delete it -> the run is cancelled. The change log then replays to the source.
SIGTERM to the run worker is a stop (CANCELED, no alert), kill -9 a failure (alerted once).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from dagster import (
    AssetCheckEvaluation,
    AssetCheckKey,
    AssetCheckSeverity,
    AssetKey,
    DagsterInstance,
    DagsterRun,
    DagsterRunStatus,
    RunsFilter,
)
from dagster._core.definitions.freshness import FreshnessState
from dagster._core.definitions.run_request import InstigatorType
from dagster._core.scheduler.instigation import InstigatorStatus, TickStatus
from deltalake import DeltaTable

from cdc_platform.testing.destinations import PASSWORD_ENV, write_conf
from cdc_platform.testing.processes import die_with_parent, stop_process_group
from cdc_platform.testing.replay import replay
from cdc_platform.testing.workload import Workload, source_rows
from dagster_defs.alerts import ALERTED_TAG, WEBHOOK_ENV
from dagster_defs.cdc_job import DESTINATION_TAG, METRICS_TAG, PID_TAG
from dagster_defs.reconcile import CHECK_NAME
from tests.conftest import MariaDBDatabase
from tests.integration.test_dagster_alerts import Webhook

pytestmark = pytest.mark.integration

PROJECT = Path(__file__).resolve().parents[2]


def wait_for(what: str, predicate: Callable[[], object], timeout: float = 90.0) -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.25)
    raise AssertionError(f"timed out waiting for: {what}")


@pytest.fixture
def dagster_home(tmp_path: Path) -> Path:
    home = tmp_path / "dagster_home"
    home.mkdir()
    text = (PROJECT / "dagster_home" / "dagster.yaml").read_text()
    (home / "dagster.yaml").write_text(
        text.replace("poll_interval_seconds: 30", "poll_interval_seconds: 1")
    )
    return home


class Daemon:
    """A Dagster daemon over the project's workspace, with its own conf directory; started
    by :meth:`start` (after a test wrote what the code location should see when it loads)."""

    def __init__(self, home: Path, conf: Path, env: dict[str, str], log: Path) -> None:
        self.conf = conf
        self.env = env
        self.log_path = log
        # Create the instance's SQLite storages before the daemon does: two processes creating
        # them at once collide ("table job_ticks already exists").
        self.instance = DagsterInstance.from_config(str(home))
        self.instance.get_runs(limit=1)
        self.instance.all_instigator_state()
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> DagsterInstance:
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "dagster._daemon", "run", "-w",
                 str(PROJECT / "workspace.yaml")],
                cwd=PROJECT, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=die_with_parent,  # noqa: PLW1509 (main thread)
            )  # fmt: skip
        return self.instance

    def stop(self) -> None:
        instance = self.instance
        for run in instance.get_runs(filters=RunsFilter(statuses=[DagsterRunStatus.STARTED])):
            pid = run.tags.get(PID_TAG)
            if pid:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), signal.SIGKILL)
        left: list[int] = []
        if self.proc is not None:
            # The daemon's group holds its code servers (`dagster api grpc`, which ignore
            # SIGTERM) and their run workers: all of it ends here.
            left = stop_process_group(self.proc)
        instance.dispose()
        if self.log_path.exists():
            print(self.log_path.read_text(errors="replace")[-6000:])
        assert left == [], f"processes of the daemon's group outlived it: {left}"


@pytest.fixture
def dagster_daemon(
    tmp_path: Path, dagster_home: Path, mariadb: MariaDBDatabase
) -> Iterator[Daemon]:
    conf = tmp_path / "conf"
    (conf / "destinations").mkdir(parents=True)
    (conf / "platform.yaml").write_text(
        f"lake_root: {tmp_path / 'lake'}\n"
        "dagster: {sensor_interval_seconds: 1, materialization_min_interval_seconds: 0, "
        "orphan_after_seconds: 30}\n"
        "metrics: {port: 0}\n"  # each run serves /metrics on a free port, named in its tags
    )
    env = {
        **os.environ,
        "DAGSTER_HOME": str(dagster_home),
        "CDC_CONF_DIR": str(conf),
        PASSWORD_ENV: mariadb.user.password,
    }
    handle = Daemon(dagster_home, conf, env, tmp_path / "daemon.log")
    try:
        yield handle
    finally:
        handle.stop()


@pytest.fixture
def daemon(dagster_daemon: Daemon) -> tuple[DagsterInstance, Path]:
    """A daemon started over an empty conf directory (destinations come and go later)."""
    return dagster_daemon.start(), dagster_daemon.conf


def runs_of(instance: DagsterInstance, name: str) -> list[DagsterRun]:
    return list(instance.get_runs(filters=RunsFilter(tags={DESTINATION_TAG: name})))


def started_run(instance: DagsterInstance, name: str, exclude: set[str]) -> DagsterRun | None:
    for run in runs_of(instance, name):
        if (
            run.status == DagsterRunStatus.STARTED
            and run.run_id not in exclude
            and run.tags.get(PID_TAG)
        ):
            return run
    return None


def status(instance: DagsterInstance, run_id: str) -> DagsterRunStatus | None:
    run = instance.get_run_by_id(run_id)
    return run.status if run else None


def finished_ticks(instance: DagsterInstance, sensor: str, *, after: float) -> int:
    """How many evaluations of ``sensor`` began after ``after`` and have ended normally."""
    return sum(
        len(
            instance.get_ticks(
                state.instigator_origin_id,
                state.selector_id,
                after=after,
                statuses=[TickStatus.SUCCESS, TickStatus.SKIPPED],
            )
        )
        for state in instance.all_instigator_state(instigator_type=InstigatorType.SENSOR)
        if state.name == sensor
    )


def change_rows(uri: str) -> int:
    try:
        return DeltaTable(uri).to_pyarrow_table(columns=["seq"]).num_rows
    except Exception:
        return 0


def committed_rows(url: str, destination: str) -> float:
    """Sum of ``cdc_rows_committed_total`` of ``destination`` scraped from ``url``."""
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("cdc_rows_committed_total{") and f'destination="{destination}"' in line
    )


def stage_destination(conf: Path, name: str, mariadb: MariaDBDatabase, lake_root: Path) -> Path:
    """A destination's directory written beside ``conf`` (not yet seen by the daemon): copy
    it under ``conf/destinations`` to add the destination."""
    write_conf(
        conf.parent / "staging",
        destination=name,
        server=mariadb.server,
        user=mariadb.user,
        database=mariadb.name,
        lake_root=lake_root,
    )
    return conf.parent / "staging" / "destinations" / name


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
    wait_for("change log created", lambda: Path(uri, "_delta_log").exists())
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
    wait_for(
        "old run CANCELED", lambda: status(instance, first.run_id) == DagsterRunStatus.CANCELED
    )
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
    wait_for(
        "run CANCELED after delete",
        lambda: status(instance, third.run_id) == DagsterRunStatus.CANCELED,
    )
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
    metadata = materializations[0].asset_materialization.metadata  # type: ignore[union-attr]
    assert metadata["rows_per_second"].value >= 0  # charted beside lag_seconds
    assert "lag_seconds" in metadata


def test_a_sigterm_to_the_run_worker_is_a_stop_not_a_failure(
    dagster_daemon: Daemon, mariadb: MariaDBDatabase, tmp_path: Path
) -> None:
    """SIGTERM straight to the live run's worker (an operator's kill, a host shutdown): the
    in-flight commit finishes and the run ends CANCELED, not FAILURE, and nothing is alerted;
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
        wait_for("change log created", lambda: Path(uri, "_delta_log").exists())
        workload.run_transactions(20)
        wait_for("rows in the change log", lambda: change_rows(uri) > 0)

        os.kill(int(first.tags[PID_TAG]), signal.SIGTERM)
        ended = wait_for(
            "SIGTERMed run finished",
            lambda: status(instance, first.run_id) in FINISHED and status(instance, first.run_id),
        )
        assert ended == DagsterRunStatus.CANCELED

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


FINISHED = (DagsterRunStatus.CANCELED, DagsterRunStatus.FAILURE, DagsterRunStatus.SUCCESS)


def check_evaluations(
    instance: DagsterInstance, name: str, db: str, table: str
) -> list[AssetCheckEvaluation]:
    key = AssetCheckKey(AssetKey(["cdc", name, db, table]), CHECK_NAME)
    records = instance.event_log_storage.get_asset_check_execution_history(key, limit=100)
    out = []
    for record in records:
        event = record.event
        if event is not None and event.dagster_event is not None:
            data = event.dagster_event.event_specific_data
            if isinstance(data, AssetCheckEvaluation):
                out.append(data)
    return out


def test_scheduled_reconciliation_under_a_real_daemon(
    dagster_daemon: Daemon, mariadb: MariaDBDatabase, tmp_path: Path
) -> None:
    """The reconcile sensor launches the per-table checks where the lease is held: rows from
    before the destination's start and a row changed behind the binlog's back are found, and
    repaired by the streaming run; the table mirrors pick the repairs up by themselves.

    The destination exists before the daemon starts, so its tables (read from the source's
    information_schema) have their assets and checks from the code location's first load."""
    conf = dagster_daemon.conf
    name = "rec"
    platform = conf / "platform.yaml"
    platform.write_text(
        platform.read_text() + "reconcile: {interval_minutes: [0.05, 0.1], chunk_size: 200}\n"
    )
    workload = Workload(mariadb.server, mariadb.name, seed=9)
    workload.create_schema()
    workload.run_transactions(100)  # before the start: only the reconciliation copies these
    staged = stage_destination(conf, name, mariadb, tmp_path / "lake")
    (conf / "destinations").mkdir(exist_ok=True)
    shutil.copytree(staged, conf / "destinations" / name)
    instance = dagster_daemon.start()
    wait_for("run STARTED", lambda: started_run(instance, name, set()))
    uri = str(tmp_path / "lake" / name / "changes")
    wait_for("change log created", lambda: Path(uri, "_delta_log").exists())
    workload.run_transactions(100)  # changes after the start: the mirrors get them
    db = mariadb.name
    for table in ("customers", "orders"):
        mirror = AssetKey(["cdc", name, db, table])
        wait_for(
            f"mirror of {table} materialized",
            lambda key=mirror: instance.fetch_materializations(records_filter=key, limit=1).records,
            timeout=180,
        )
    wait_for(
        "a reconciliation that compared the customers mirror and passed",
        lambda: any(
            e.passed and int(e.metadata["source_rows"].value) > 0  # type: ignore[arg-type]
            for e in check_evaluations(instance, name, db, "customers")
        ),
        timeout=180,
    )
    seen = len(check_evaluations(instance, name, db, "customers"))
    quiet_id = int(
        mariadb.server.query("SELECT MIN(id) FROM customers", mariadb.name)[0][0]  # type: ignore[arg-type]
    )
    mariadb.server.execute(
        "SET sql_log_bin = 0",
        f"UPDATE customers SET name = 'changed quietly' WHERE id = {quiet_id}",
        database=mariadb.name,
    )
    failed = wait_for(
        "a reconciliation that found and repaired the quiet change",
        lambda: [
            e
            for e in check_evaluations(instance, name, db, "customers")[: -seen or None]
            if not e.passed and int(e.metadata["changed"].value) >= 1  # type: ignore[arg-type]
        ],
        timeout=240,
    )
    assert isinstance(failed, list)
    assert failed[0].severity == AssetCheckSeverity.WARN
    assert failed[0].metadata["repaired_by"].value.endswith("(lease holder)")  # type: ignore[union-attr]
    key = (("id", quiet_id),)
    expected = source_rows(mariadb.server, mariadb.name, "customers")[key]
    assert expected["name"] == "changed quietly"

    def repaired_row() -> bool:
        return replay(uri).tables.get(f"{mariadb.name}.customers", {}).get(key) == expected

    wait_for("the repair in the change log", repaired_row)
    result = replay(uri)
    for table in ("customers", "orders"):  # rows from before the start were filled in too
        assert result.tables[f"{mariadb.name}.{table}"] == source_rows(
            mariadb.server, mariadb.name, table
        ), table
    shutil.rmtree(conf / "destinations" / name)


def mirror_materializations(instance: DagsterInstance, key: AssetKey) -> int:
    return len(instance.fetch_materializations(records_filter=key, limit=1000).records)


def freshness(instance: DagsterInstance, keys: list[AssetKey]) -> set[FreshnessState]:
    records = instance.get_freshness_state_records(keys)
    return {records[k].freshness_state if k in records else FreshnessState.UNKNOWN for k in keys}


@pytest.mark.timeout(1200)  # two mirrors runs (a run worker each) and the 60 s freshness window
def test_mirrors_follow_a_live_workload_and_go_stale_without_their_sensor(
    dagster_daemon: Daemon, mariadb: MariaDBDatabase, tmp_path: Path
) -> None:
    """Under a live workload every mirror is materialized again and again by mirror_refresh
    (the one mechanism) and its freshness policy (the lag budget, 60 s) stays PASS; the change
    log's lag check is evaluated by the running monitor without any run. With the sensor
    stopped, as a user does in the UI, the mirrors turn FAIL on their own."""
    conf = dagster_daemon.conf
    name = "live"
    workload = Workload(mariadb.server, mariadb.name, seed=27)
    workload.create_schema()
    staged = stage_destination(conf, name, mariadb, tmp_path / "lake")
    instance_yaml = staged / "instance.yaml"
    instance_yaml.write_text(instance_yaml.read_text() + "lag_budget_seconds: 60\n")
    shutil.copytree(staged, conf / "destinations" / name)
    dagster_daemon.env["FRESHNESS_DAEMON_INTERVAL_SECONDS"] = "3"
    instance = dagster_daemon.start()
    mirrors = [AssetKey(["cdc", name, mariadb.name, t]) for t in ("customers", "orders")]
    workload.start(rate_per_second=5)
    try:
        wait_for("run STARTED", lambda: started_run(instance, name, set()), timeout=300)
        wait_for(
            "every mirror materialized again (a second mirrors run)",
            lambda: all(mirror_materializations(instance, k) >= 2 for k in mirrors),
            timeout=600,
        )
        wait_for("mirrors fresh", lambda: freshness(instance, mirrors) == {FreshnessState.PASS})
        runs = instance.get_runs(filters=RunsFilter(job_name="cdc_mirrors"))
        assert runs
        assert all(r.tags.get("cdc/mirrors") == name for r in runs)
        lag = AssetCheckKey(AssetKey(["cdc", name, "changes"]), "lag_within_budget")
        records = instance.event_log_storage.get_asset_check_execution_history(lag, limit=10)
        assert records, "the running monitor evaluates the lag check, without a run"
    finally:
        workload.stop()

    (state,) = [s for s in instance.all_instigator_state() if s.name == "mirror_refresh"]
    instance.update_instigator_state(state.with_status(InstigatorStatus.STOPPED))
    wait_for(
        "the mirrors FAIL their freshness on their own",
        lambda: freshness(instance, mirrors) == {FreshnessState.FAIL},
        timeout=180,
    )
