"""kill -9 `cdc-platform run` at random moments under a random workload, then check the result.

Shared by the crash-safety test (a few kills) and `bench/crash_kill.py` (many): after the last
restart drains the binlog, the change log replayed by primary key must equal the source tables,
with no change twice and no gap in `seq`.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from deltalake import DeltaTable

from cdc_platform.testing.destinations import PASSWORD_ENV, write_conf
from cdc_platform.testing.mariadb import MariaDBServer, ReplicationUser
from cdc_platform.testing.processes import wait_for
from cdc_platform.testing.replay import ReplayResult, replay
from cdc_platform.testing.workload import Workload, source_rows

__all__ = ["KillReport", "kill_cycle", "start_run", "wait_for_change_log", "while_running"]


@dataclass
class KillReport:
    """What happened: kills, restarts, the replay and the comparison with the source."""

    kills: int = 0
    transactions: int = 0
    replay: ReplayResult | None = None
    mismatches: dict[str, str] = field(default_factory=dict)
    logs: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when the change log replays to exactly the source, once."""
        r = self.replay
        return (
            r is not None
            and not r.duplicates
            and not r.seq_gaps
            and not r.problems
            and not self.mismatches
        )


def start_run(
    conf: Path, destination: str, env: dict[str, str], log: Path, *extra: str
) -> subprocess.Popen[bytes]:
    """``cdc-platform run`` of ``destination`` in a session of its own (so a test can kill
    its process group), its output appended to ``log``."""
    with log.open("ab") as out:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "cdc_platform.cli",
                "run",
                "--conf",
                str(conf),
                "--destination",
                destination,
                "--metrics-interval",
                "2",
                *extra,
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )


def while_running(
    proc: subprocess.Popen[bytes], check: Callable[[], bool], what: str
) -> Callable[[], bool]:
    """A :func:`wait_for` probe: ``check()``, failing at once when ``proc`` exited first."""

    def probe() -> bool:
        if check():
            return True
        assert proc.poll() is None, f"cdc-platform run exited ({proc.returncode}) before {what}"
        return False

    return probe


def wait_for_change_log(uri: str, proc: subprocess.Popen[bytes], timeout: float = 60.0) -> None:
    """Wait until the run ``proc`` made its first commit to the change log at ``uri``."""
    what = f"its first commit (a change log at {uri})"
    wait_for(while_running(proc, lambda: _opens(uri), what), what, timeout=timeout, interval=0.1)


def _opens(uri: str) -> bool:
    """Whether the Delta table at ``uri`` (a local path or an object store's) opens."""
    try:
        DeltaTable(uri)
    except Exception:
        return False
    return True


def kill_cycle(
    server: MariaDBServer,
    user: ReplicationUser,
    database: str,
    workdir: Path,
    *,
    kills: int,
    seed: int = 7,
    min_alive: float = 0.5,
    max_alive: float = 3.0,
    lake_root: str | None = None,
) -> KillReport:
    """Run the workload, kill -9 the pipeline ``kills`` times, drain, replay and compare.

    ``lake_root``: where the lake is (default: ``workdir/lake``); an ``s3://`` lake is reached
    through the AWS variables of this process's environment, which the runs inherit.
    """
    rng = random.Random(seed)
    destination = "crash"
    conf = workdir / "conf"
    lake = lake_root if lake_root is not None else str(workdir / "lake")
    write_conf(
        conf,
        destination=destination,
        server=server,
        user=user,
        database=database,
        lake_root=lake,
        # the default SQLite lease: every run of this test is on this one machine
        extra_platform="lease: {backend: database, single_machine: true}\n",
    )
    uri = f"{lake.rstrip('/')}/{destination}/changes"
    env = {**os.environ, PASSWORD_ENV: user.password}
    log = workdir / "run.log"
    report = KillReport()

    workload = Workload(server, database, seed=seed)
    workload.create_schema()
    proc = start_run(conf, destination, env, log)
    try:
        wait_for_change_log(uri, proc)
        workload.start()
        for _ in range(kills):
            time.sleep(rng.uniform(min_alive, max_alive))
            if proc.poll() is not None:
                raise RuntimeError(f"cdc-platform run died on its own (exit {proc.returncode})")
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            report.kills += 1
            proc = start_run(conf, destination, env, log)
        time.sleep(rng.uniform(min_alive, max_alive))
        workload.stop()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        drain = start_run(conf, destination, env, log, "--exit-when-idle", "3")
        if drain.wait(timeout=300) != 0:
            raise RuntimeError(f"the draining run failed (exit {drain.returncode})")
    finally:
        workload.stop()
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        report.logs = log.read_text(errors="replace").splitlines()[-80:] if log.exists() else []

    report.transactions = workload.stats.committed
    report.replay = replay(uri)
    for table in ("customers", "orders"):
        expected = source_rows(server, database, table)
        actual = report.replay.tables.get(f"{database}.{table}", {})
        if actual != expected:
            missing = sorted(set(expected) - set(actual))[:5]
            extra = sorted(set(actual) - set(expected))[:5]
            changed = [k for k in set(expected) & set(actual) if expected[k] != actual[k]][:3]
            report.mismatches[table] = (
                f"{len(expected)} source rows vs {len(actual)} replayed; missing {missing}, "
                f"extra {extra}, changed {[(k, expected[k], actual[k]) for k in changed]}"
            )
    return report
