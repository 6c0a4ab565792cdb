"""A real Dagster daemon over the project's workspace, for the end-to-end tests.

The fixtures that start it (``dagster_home``, ``dagster_daemon``, ``daemon``) are in this
directory's conftest.py; the test files of ``test_dagster_e2e*.py`` share what is here.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Callable
from pathlib import Path

from dagster import (
    DagsterInstance,
    DagsterRun,
    DagsterRunStatus,
    RunsFilter,
)
from dagster._core.definitions.run_request import InstigatorType
from dagster._core.scheduler.instigation import InstigatorStatus, TickStatus
from deltalake import DeltaTable

from cdc_platform.testing.destinations import PASSWORD_ENV, write_conf
from cdc_platform.testing.processes import die_with_parent, stop_process_group
from cdc_platform.testing.processes import wait_for as wait_until_true
from dagster_defs.cdc_job import DESTINATION_TAG, PID_TAG
from tests.conftest import MariaDBDatabase

PROJECT = Path(__file__).resolve().parents[2]


def wait_for(what: str, predicate: Callable[[], object], timeout: float = 90.0) -> object:
    """``predicate``'s first true value (:func:`cdc_platform.testing.processes.wait_for`).
    Polled at 0.1 s, then less often, up to once a second: most waits are for a daemon tick
    or a run taking many seconds, and each poll reads the instance's storage (at 0.25 s these
    polls were a quarter of a test worker's CPU in the Dagster tests)."""
    return wait_until_true(predicate, what, timeout=timeout, interval=0.1, slowing_to=1.0)


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


def keep_sensor_stopped(instance: DagsterInstance, sensor: str) -> None:
    """Stop ``sensor`` as the UI does, again if it runs: a tick in progress when it is stopped
    writes its own copy of the state back at its end (status included), undoing the stop."""
    for state in instance.all_instigator_state(instigator_type=InstigatorType.SENSOR):
        if state.name == sensor and state.status != InstigatorStatus.STOPPED:
            instance.update_instigator_state(state.with_status(InstigatorStatus.STOPPED))


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


FINISHED = (DagsterRunStatus.CANCELED, DagsterRunStatus.FAILURE, DagsterRunStatus.SUCCESS)


def daemon_for(tmp_path: Path, mariadb: MariaDBDatabase) -> Daemon:
    """A daemon (not started) with its own DAGSTER_HOME (1 s run monitoring) and conf
    directory (5 s sensors, a metrics port per run) under ``tmp_path``.

    Each sensor tick is work in the daemon and the code server (Dagster builds an instance
    for each evaluation): with 1 s sensors the three e2e files took 399 CPU-seconds and 275 s
    side by side, with 3 s 294 CPU-s and 176 s (an earlier state of the project). Measured
    again later, every process sampled from /proc: 3 s took 226 and 227 CPU-s (154 and 158 s),
    5 s 198 and 201 CPU-s (168 and 170 s). The test suite is bound by the CPU of its two
    cores, so the fewer ticks are faster overall; the mirror refresh ticks every 5 s either
    way (its floor). Run monitoring's poll (1 s here) made no difference (226 at 5 s)."""
    home = tmp_path / "dagster_home"
    home.mkdir()
    text = (PROJECT / "dagster_home" / "dagster.yaml").read_text()
    (home / "dagster.yaml").write_text(
        text.replace("poll_interval_seconds: 30", "poll_interval_seconds: 1")
    )
    conf = tmp_path / "conf"
    (conf / "destinations").mkdir(parents=True)
    (conf / "platform.yaml").write_text(
        f"lake_root: {tmp_path / 'lake'}\n"
        "dagster: {sensor_interval_seconds: 5, materialization_min_interval_seconds: 0, "
        "orphan_after_seconds: 30}\n"
        "metrics: {port: 0}\n"  # each run serves /metrics on a free port, named in its tags
    )
    env = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "CDC_CONF_DIR": str(conf),
        PASSWORD_ENV: mariadb.user.password,
    }
    return Daemon(home, conf, env, tmp_path / "daemon.log")
