"""The provider in a real Airflow (``dag.test()``, SQLite metadata database) against a
destination captured by ``cdc-platform run`` from the private MariaDB into real Delta tables.

* The shipped example DAG file is parsed from the DAGs folder; the change log's
  ``AssetWatcher`` trigger, rebuilt from the row Airflow stored for it, fires on new commits;
  its event, submitted as the triggerer does, queues the mirrors DAG, whose run builds a
  mirror equal to the source and records the mirror's asset event with its row count.
* The deferrable sensor defers on a binlog position the change log has not reached, and
  completes once the capture (started only after the deferral) passes it.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from airflow.dag_processing.bundles.manager import DagBundlesManager
from airflow.dag_processing.dagbag import DagBag, sync_bag_to_db
from airflow.models.asset import AssetDagRunQueue, AssetEvent, AssetModel
from airflow.models.taskinstance import TaskInstance
from airflow.models.trigger import Trigger
from airflow.triggers.base import TriggerEvent
from airflow.utils.session import create_session
from airflow.utils.state import DagRunState, TaskInstanceState
from deltalake import DeltaTable
from sqlalchemy import select

from cdc_airflow.operators import CdcMirrorOperator
from cdc_airflow.probes import change_log_head, parse_position
from cdc_airflow.triggers import ChangeLogCommitTrigger
from cdc_platform.errors import CdcError
from cdc_platform.testing.destinations import PASSWORD_ENV, write_conf
from cdc_platform.testing.ha import fast_database_lease
from cdc_platform.testing.processes import stop_process
from cdc_platform.testing.workload import source_rows
from tests.airflow.conftest import DAGS_FOLDER
from tests.conftest import MariaDBDatabase

pytestmark = pytest.mark.integration

PROJECT = Path(__file__).resolve().parents[2]
DESTINATION = "shop"
BUNDLE = "dags-folder"
"""Airflow's default bundle: the DAGs folder."""
SENSOR_DAG = f"""\
from datetime import datetime, UTC

from airflow.sdk import DAG

from cdc_airflow.sensors import CdcChangeLogSensor, ChangeLogPolling

with DAG("cdc_wait_for_position", schedule=None, start_date=datetime(2026, 1, 1, tzinfo=UTC)):
    CdcChangeLogSensor(
        task_id="wait",
        destination="{DESTINATION}",
        position="{{{{ dag_run.conf['position'] }}}}",
        polling=ChangeLogPolling(poll_seconds=0.5),
    )
"""


def wait_for(what: str, predicate: Callable[[], object], timeout: float = 90.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for: {what}")


@dataclass
class Capture:
    """`cdc-platform run` of the destination, started and stopped by the test."""

    conf: Path
    lake: Path
    env: dict[str, str]
    log: Path
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Start; returns once the destination streams (its first commit is in the log)."""
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "cdc_platform.cli", "run", "--conf", str(self.conf),
                 "--destination", DESTINATION, "--metrics-interval", "2"],
                stdout=out, stderr=subprocess.STDOUT, env=self.env, start_new_session=True,
            )  # fmt: skip
        wait_for("the capture to stream", self.streaming)

    def streaming(self) -> bool:
        try:
            return change_log_head(self.uri, DESTINATION) is not None
        except CdcError:
            return False

    @property
    def uri(self) -> str:
        return str(self.lake / DESTINATION / "changes")

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc)
            self.proc = None

    def passed(self, position: str) -> bool:
        try:
            head = change_log_head(self.uri, DESTINATION)
        except CdcError:  # read while the first commits land: see the sensor's poke
            return False
        return head is not None and head.passed(parse_position(position))


@pytest.fixture
def capture(
    tmp_path: Path, mariadb: MariaDBDatabase, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Capture]:
    """A destination on the test's database. Airflow gets the source password from its
    connection (the hook hands it to the engine), the capture from its environment."""
    conf = tmp_path / "conf"
    write_conf(
        conf,
        destination=DESTINATION,
        server=mariadb.server,
        user=mariadb.user,
        database=mariadb.name,
        lake_root=tmp_path / "lake",
        server_id=3301,
        extra_platform=fast_database_lease(f"sqlite:///{tmp_path}/lease.db"),
    )
    monkeypatch.setenv(PASSWORD_ENV, "")  # so that the hook's export is undone after the test
    monkeypatch.delenv(PASSWORD_ENV)
    connection = {
        "conn_type": "cdc_platform",
        "password": mariadb.user.password,
        "extra": {"conf_dir": str(conf), "password_env": PASSWORD_ENV},
    }
    monkeypatch.setenv("AIRFLOW_CONN_CDC_DEFAULT", json.dumps(connection))
    monkeypatch.setenv("CDC_AIRFLOW_DESTINATION", DESTINATION)
    env = {**os.environ, PASSWORD_ENV: mariadb.user.password}
    runner = Capture(conf, tmp_path / "lake", env, tmp_path / "capture.log")
    yield runner
    runner.stop()
    for dag_file in DAGS_FOLDER.glob("*.py"):
        dag_file.unlink()
    if runner.log.exists():
        print(runner.log.read_text(errors="replace")[-4000:])


def _insert(mariadb: MariaDBDatabase, first: int, count: int) -> str:
    """Rows ``first..first+count-1``; the binlog position after them."""
    values = ", ".join(f"({i}, 'item {i}', {i * 1.5})" for i in range(first, first + count))
    mariadb.server.execute(f"INSERT INTO items VALUES {values}", database=mariadb.name)
    return str(mariadb.server.binlog_position().binlog_position)


def _mirror_rows(uri: str) -> dict[Any, dict[str, Any]]:
    """The mirror's rows keyed and valued as :func:`source_rows` gives them (DECIMAL as text)."""
    rows = DeltaTable(uri).to_pyarrow_table().to_pylist()
    return {
        (("id", row["id"]),): {
            k: str(row[k]) if isinstance(row[k], Decimal) else row[k]
            for k in ("id", "name", "price")
        }
        for row in rows
    }


def test_mirrors_dag_runs_on_change_log_asset_event_and_mirror_equals_source(
    airflow_db: Path, mariadb: MariaDBDatabase, capture: Capture
) -> None:

    mariadb.server.execute(
        "CREATE TABLE items (id INT PRIMARY KEY, name VARCHAR(40), price DECIMAL(10,2))",
        database=mariadb.name,
    )
    capture.start()
    position = _insert(mariadb, 1, 20)
    wait_for("the first rows in the change log", lambda: capture.passed(position))
    shutil.copy(PROJECT / "cdc_airflow" / "example_dags" / "cdc_destination.py", DAGS_FOLDER)
    bag = DagBag(dag_folder=str(DAGS_FOLDER), safe_mode=False, bundle_name=BUNDLE)
    assert not bag.import_errors
    dags = bag.dags
    mirrors = dags[f"cdc_{DESTINATION}_mirrors"]
    assert sorted(dags) == [
        f"cdc_{DESTINATION}_{n}" for n in ("daily_history", "mirrors", "reconcile")
    ]
    # What the DAG processor does with a parsed file: the DAGs, their assets and the
    # watcher's trigger go to the database.
    DagBundlesManager().sync_bundles_to_db()
    sync_bag_to_db(bag, BUNDLE, None)
    with create_session() as session:
        (row,) = session.scalars(
            select(Trigger).where(
                Trigger.classpath == "cdc_airflow.triggers.ChangeLogCommitTrigger"
            )
        ).all()
        trigger_id, trigger_kwargs = row.id, row.kwargs

    trigger = ChangeLogCommitTrigger(**trigger_kwargs)
    assert trigger.table_uri == str(capture.lake / DESTINATION / "changes")

    # The triggerer's part: run the trigger while the source keeps changing.
    stop = threading.Event()
    written = {"next": 21, "position": position}

    def workload() -> None:
        while not stop.is_set():
            written["position"] = _insert(mariadb, written["next"], 5)
            written["next"] += 5
            stop.wait(0.3)

    async def first_event() -> TriggerEvent:
        return await asyncio.wait_for(anext(trigger.run()), timeout=90)

    writer = threading.Thread(target=workload, daemon=True)
    writer.start()
    try:
        event = asyncio.run(first_event())
    finally:
        stop.set()
        writer.join()
    assert event.payload["destination"] == DESTINATION
    assert event.payload["change_log_version"] > 0
    final = str(written["position"])
    wait_for("every row in the change log", lambda: capture.passed(final))

    Trigger.submit_event(trigger_id, event)
    with create_session() as session:
        queued = session.scalars(select(AssetDagRunQueue.target_dag_id)).all()
        assert queued == [mirrors.dag_id], "the change-log event queued the mirrors DAG"
        session.execute(AssetDagRunQueue.__table__.delete())  # the scheduler's part, next

    assert mirrors.test().state == DagRunState.SUCCESS
    source = source_rows(mariadb.server, mariadb.name, "items")
    assert len(source) == written["next"] - 1
    (operator,) = mirrors.tasks
    assert _mirror_rows(operator.mirror.uri.removeprefix("file://")) == source

    newest_extra = _event_extra(f"cdc/{DESTINATION}/{mariadb.name}/items")
    assert newest_extra["row_count"] == len(source)
    assert newest_extra["change_log_version"] >= event.payload["change_log_version"]

    # Reconciliation (the source password reaches the engine from the connection only).
    assert dags[f"cdc_{DESTINATION}_reconcile"].test().state == DagRunState.SUCCESS
    report = _event_extra(f"cdc/{DESTINATION}/changes")
    assert (report["status"], report["differences"]) == ("clean", 0)
    assert report["source_rows"] == len(source)

    # Daily history of today: a run whose data interval is today (UTC) builds today's table.
    history = dags[f"cdc_{DESTINATION}_daily_history"]
    tomorrow = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    tomorrow += timedelta(days=1)
    assert history.test(logical_date=tomorrow).state == DagRunState.SUCCESS
    extra = _event_extra(f"cdc/{DESTINATION}/{mariadb.name}/items/daily_history")
    assert extra["day"] == (tomorrow - timedelta(days=1)).date().isoformat()
    assert extra["row_count"] == len(source)
    assert extra["inserts"] == len(source)
    assert _mirror_rows(str(extra["uri"])) == source


def _event_extra(asset_name: str) -> dict[str, Any]:
    """The extra of the newest event of the asset named ``asset_name``."""
    with create_session() as session:
        newest = session.scalars(
            select(AssetEvent)
            .join(AssetModel, AssetEvent.asset_id == AssetModel.id)
            .where(AssetModel.name == asset_name)
            .order_by(AssetEvent.id.desc())
        ).first()
        assert newest is not None, f"no event of {asset_name}"
        return dict(newest.extra)


def test_deferred_sensor_completes_when_the_change_log_passes_a_position(
    airflow_db: Path, mariadb: MariaDBDatabase, capture: Capture
) -> None:

    mariadb.server.execute(
        "CREATE TABLE items (id INT PRIMARY KEY, name VARCHAR(40), price DECIMAL(10,2))",
        database=mariadb.name,
    )
    capture.start()
    first = _insert(mariadb, 1, 3)
    wait_for("the first rows in the change log", lambda: capture.passed(first))
    capture.stop()
    target = _insert(mariadb, 4, 3)  # written while nothing captures
    assert not capture.passed(target)
    (DAGS_FOLDER / "cdc_wait_for_position.py").write_text(SENSOR_DAG)
    bag = DagBag(dag_folder=str(DAGS_FOLDER), safe_mode=False)
    assert not bag.import_errors
    dag = bag.dags["cdc_wait_for_position"]

    def deferred() -> bool:
        with create_session() as session:
            return bool(
                session.scalars(
                    select(Trigger.id).where(
                        Trigger.classpath == "cdc_airflow.triggers.ChangeLogPositionTrigger"
                    )
                ).first()
            )

    seen: dict[str, bool] = {}

    def resume_capture_once_deferred() -> None:
        try:
            seen["deferred"] = bool(wait_for("the sensor to defer", deferred, timeout=120))
        finally:
            capture.start()  # either way, so that the run ends

    resumer = threading.Thread(target=resume_capture_once_deferred, daemon=True)
    resumer.start()
    run = dag.test(run_conf={"position": target})
    resumer.join(timeout=130)
    assert run.state == DagRunState.SUCCESS
    with create_session() as session:
        (ti,) = session.scalars(
            select(TaskInstance).where(
                TaskInstance.dag_id == dag.dag_id, TaskInstance.run_id == run.run_id
            )
        ).all()
        assert ti.state == TaskInstanceState.SUCCESS
    assert seen.get("deferred"), "the capture resumed before the sensor deferred"
    assert capture.passed(target)


def test_look_alike_and_dotted_database_tables_load_and_mirror(
    airflow_db: Path, mariadb: MariaDBDatabase, capture: Capture
) -> None:
    """`<db>.a_b` and `<db>.a` + `b` (a database whose name holds a dot) were one task id
    (`mirror_<db>_a_b`: DuplicateTaskIdFound, none of the three DAGs loaded), and the
    operators split `<db>.a.b` at the first dot (table `a.b` of `<db>`, which does not
    exist). Now all three DAGs load, and the mirrors run builds both mirrors, each equal to
    its own source table."""
    db, dotted = mariadb.name, f"{mariadb.name}.a"
    server = mariadb.server
    server.execute(f"DROP DATABASE IF EXISTS `{dotted}`", f"CREATE DATABASE `{dotted}`")
    try:
        server.execute("CREATE TABLE a_b (id INT PRIMARY KEY, v VARCHAR(20))", database=db)
        server.execute("CREATE TABLE b (id INT PRIMARY KEY, v VARCHAR(20))", database=dotted)
        capture.start()
        server.execute("INSERT INTO a_b VALUES (1, 'plain'), (2, 'plain')", database=db)
        server.execute("INSERT INTO b VALUES (1, 'dotted'), (3, 'dotted')", database=dotted)
        end = str(server.binlog_position().binlog_position)
        wait_for("both tables' rows in the change log", lambda: capture.passed(end))
        shutil.copy(PROJECT / "cdc_airflow" / "example_dags" / "cdc_destination.py", DAGS_FOLDER)
        bag = DagBag(dag_folder=str(DAGS_FOLDER), safe_mode=False, bundle_name=BUNDLE)
        assert not bag.import_errors
        assert sorted(bag.dags) == [
            f"cdc_{DESTINATION}_{n}" for n in ("daily_history", "mirrors", "reconcile")
        ]
        mirrors = bag.dags[f"cdc_{DESTINATION}_mirrors"]
        history = bag.dags[f"cdc_{DESTINATION}_daily_history"]
        for dag in (mirrors, history):
            assert sorted((t.db, t.table) for t in dag.tasks) == [(db, "a_b"), (dotted, "b")]
        assert mirrors.test().state == DagRunState.SUCCESS
        # A hand-written operator naming `<db>.a.b`: the table the catalog has.
        named = CdcMirrorOperator(task_id="by_name", destination=DESTINATION, table=f"{dotted}.b")
        assert (named.db, named.table) == (dotted, "b")
        for operator in mirrors.tasks:
            extra = _event_extra(f"cdc/{DESTINATION}/{operator.db}/{operator.table}")
            assert extra["row_count"] == 2
            rows = DeltaTable(str(extra["uri"])).to_pyarrow_table().to_pylist()
            got = {(("id", r["id"]),): {"id": r["id"], "v": r["v"]} for r in rows}
            assert got == source_rows(server, operator.db, operator.table), operator.task_id
    finally:
        server.execute(f"DROP DATABASE IF EXISTS `{dotted}`")
