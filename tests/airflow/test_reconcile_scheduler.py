"""The reconcile timetable under a real Airflow scheduler and DAG processor (SQLite metadata
database of tests/airflow/conftest.py): a DAG scheduled as ``destination_dags`` schedules the
reconcile DAG (``RandomIntervalTimetable``, no catch-up, a start date in the past,
``max_active_runs=1``), with a 1-2 minute interval, gets scheduled runs one after the other.

The DAG processor re-parses the file every 30 s (Airflow's default) and recomputes the next
run each time; a timetable whose next run depended on the moment it was asked moved the due
time ahead at every parse, and no run ever came. The task is an ``EmptyOperator``, which the
scheduler completes itself (no executor, no API server): what is under test is the schedule.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from airflow.models.dag import DagModel
from airflow.models.dagrun import DagRun
from airflow.utils.session import create_session
from sqlalchemy import select

from cdc_platform.testing.processes import stop_process_group, tail_of
from tests.airflow.conftest import DAGS_FOLDER

pytestmark = pytest.mark.integration

DAG_ID = "cdc_schedule_reconcile"
DAG_FILE = f"""\
from datetime import datetime, UTC

from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG

from cdc_airflow.timetables import RandomIntervalTimetable

with DAG(
    "{DAG_ID}",
    schedule=RandomIntervalTimetable(1, 2),
    start_date=datetime(2026, 1, 1, tzinfo=UTC),
    catchup=False,
    max_active_runs=1,
):
    EmptyOperator(task_id="reconcile")
"""
RUNS = 2
TIMEOUT = 60 + RUNS * 2 * 60 + 60
"""The first parse (the folder is listed every 5 s here), then at most the interval's 2
minutes per run, and a minute for the scheduler's loop on a loaded machine."""


def wait_for(what: str, predicate: Callable[[], object], timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(1.0)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for: {what}")


@pytest.fixture
def airflow_daemons(airflow_db: Path, tmp_path: Path) -> Iterator[list[Path]]:
    """``airflow dag-processor`` and ``airflow scheduler`` on the test database, with the DAG
    file in the DAGs folder; both stopped and the file removed afterwards."""
    (DAGS_FOLDER / f"{DAG_ID}.py").write_text(DAG_FILE)
    env = {**os.environ, "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5"}
    procs, logs = [], []
    try:
        for command in ("dag-processor", "scheduler"):
            log = tmp_path / f"{command}.log"
            with log.open("ab") as out:
                proc = subprocess.Popen(
                    [sys.executable, "-m", "airflow", command],
                    stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True,
                )  # fmt: skip
            procs.append(proc)
            logs.append(log)
        yield logs
    finally:
        left = [pid for proc in procs for pid in stop_process_group(proc)]
        (DAGS_FOLDER / f"{DAG_ID}.py").unlink(missing_ok=True)
        assert not left, f"Airflow processes outlived the test: {left}"


def test_the_reconcile_timetable_gets_scheduled_runs_from_a_real_scheduler(
    airflow_daemons: list[Path],
) -> None:
    due_times: list[object] = []

    def scheduled_runs() -> list[DagRun] | None:
        with create_session() as session:
            model = session.get(DagModel, DAG_ID)
            if model is not None and model.next_dagrun_create_after not in due_times[-1:]:
                due_times.append(model.next_dagrun_create_after)
            runs = session.scalars(
                select(DagRun)
                .where(DagRun.dag_id == DAG_ID, DagRun.run_type == "scheduled")
                .order_by(DagRun.run_after)
            ).all()
            for run in runs:
                session.expunge(run)
        return list(runs) if len(runs) >= RUNS else None

    try:
        runs = wait_for(f"{RUNS} scheduled runs", scheduled_runs, TIMEOUT)
    except AssertionError as missing:
        logs = "\n".join(tail_of(log, 15) for log in airflow_daemons)
        raise AssertionError(
            f"{missing}; the DAG's next run was due at, in turn: {due_times}\n{logs}"
        ) from None
    first, second = runs[:2]
    gap = second.data_interval_end - first.data_interval_end
    assert timedelta(minutes=1) <= gap <= timedelta(minutes=2)
    assert first.state == "success"
