"""Decode worker processes: a worker that dies mid-stream, and workers started only when needed.

A decode worker killed (SIGKILL) while batches are in flight must end the run with a
non-transient ``SourceError`` naming the binlog position, with the change log holding only
the batches committed before it; the next run (a new pool) resumes from the last committed
batch and the change log ends up equal, row for row and ``seq`` for ``seq``, to that of a
1-worker run of the same binlog: exactly once (docs/faults.md). The kill is made
deterministic by stopping (SIGSTOP) the workers before the next transactions reach them, so
their batches are known to be pending when one worker is killed.

A stream of small rows events only (decoded in the reader thread) never starts worker
processes; one rows event above the inline threshold does.
"""

from __future__ import annotations

import os
import re
import signal
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from deltalake import DeltaTable

from cdc_platform.config.instance import InstanceConfig
from cdc_platform.errors import SourceError
from cdc_platform.events import ResumePosition
from cdc_platform.runtime import DestinationRuntime, RunSummary
from cdc_platform.sink import DeltaChangeLog
from cdc_platform.sink.destination_lake import DestinationLake
from cdc_platform.sink.term import WriteTerm
from cdc_platform.source.stream.binlog import BinlogSource
from cdc_platform.source.stream.decode_pool import (
    DEFAULT_INLINE_BYTES,
    DecodePool,
    WorkerPool,
)
from cdc_platform.testing.destinations import PASSWORD_ENV, instance_config
from cdc_platform.testing.processes import wait_for
from tests.conftest import MariaDBDatabase

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

_VARYING = {"committed_at", "batch_seq", "resume_position"}  # on each commit's last row
"""Columns that depend on when batches were cut and committed, not on what was captured."""

_WAIT = 30.0


def _config(db: MariaDBDatabase, workers: int, server_id: int) -> InstanceConfig:
    base = instance_config(
        db.server,
        db.user.name,
        [rf"{db.name}\..*"],
        server_id=server_id,
        buffer_size=64,
        batch_mode="ITEMSIZE",
        batch_size=16,
    )
    source = base.source.model_copy(update={"decode_workers": workers})
    return base.model_copy(update={"source": source})


def _pin(uri: str, start: ResumePosition) -> None:
    """A change log whose checkpoint is ``start`` (every run here reads from there)."""
    sink = DeltaChangeLog(uri, "d")
    sink.commit((), batch_seq=1, resume=start, epoch=0)
    sink.close()


def _rows(uri: str) -> list[dict[str, object]]:
    rows = DeltaTable(uri).to_pyarrow_table().to_pylist()
    rows.sort(key=lambda row: int(row["seq"]))
    return [{k: v for k, v in row.items() if k not in _VARYING} for row in rows]


def _until(what: str, check: Callable[[], bool], summary: list[RunSummary]) -> None:
    """Wait for ``check`` while the run goes on (its end first fails the test)."""

    def met() -> bool:
        assert not summary, f"the run ended before {what}: {summary[0]}"
        return check()

    wait_for(met, what, timeout=_WAIT, interval=0.02)


def _pool(runtime: DestinationRuntime) -> DecodePool | None:
    source = runtime.source  # set once run() has opened it
    return source.decode_pool if isinstance(source, BinlogSource) else None


def _workers(runtime: DestinationRuntime) -> WorkerPool | None:
    """The run's decode worker processes (None before they started)."""
    pool = _pool(runtime)
    return None if pool is None else pool.worker_pool()


def _in_thread(
    runtime: DestinationRuntime, idle: float | None = None
) -> tuple[threading.Thread, list[RunSummary]]:
    summary: list[RunSummary] = []

    def run() -> None:
        summary.append(runtime.run(exit_when_idle_seconds=idle))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, summary


def _ended(runtime: DestinationRuntime, thread: threading.Thread) -> None:
    thread.join(_WAIT)
    if thread.is_alive():
        runtime.request_stop("test timed out")
        thread.join(_WAIT)
        pytest.fail("the run did not end on its own")


def test_a_killed_decode_worker_fails_the_run_and_the_next_run_resumes_exactly_once(
    mariadb: MariaDBDatabase, lake_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(PASSWORD_ENV, mariadb.user.password)
    server, db = mariadb.server, mariadb.name
    start = server.binlog_position()
    server.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(40), n INT)", database=db)

    def bulk(first: int) -> str:  # 200 rows: one rows event well above the inline threshold
        return "INSERT INTO t VALUES " + ", ".join(
            f"({i}, 'value-{i}-{'x' * 20}', {i})" for i in range(first, first + 200)
        )

    server.execute(bulk(0), bulk(200), database=db)  # read and committed before the kill
    before = 1 + 400
    layout = DestinationLake.at(lake_root, "faulty")
    uri = layout.change_log
    _pin(uri, start)
    runtime = DestinationRuntime(WriteTerm("d", _config(mariadb, 2, 2711), layout))
    thread, summary = _in_thread(runtime)

    def committed() -> bool:
        return len(DeltaTable(uri).to_pyarrow_table()) >= before

    _until("the first transactions were committed", committed, summary)

    def started() -> bool:
        workers = _workers(runtime)
        return workers is not None and len(workers.pids()) == 2

    _until("the decode workers started", started, summary)
    pool = _workers(runtime)
    assert pool is not None
    victim, other = pool.pids()
    assert not pool.in_flight()  # everything written so far was decoded
    for pid in (victim, other):
        os.kill(pid, signal.SIGSTOP)
    try:
        with server.connect(db, autocommit=False) as conn, conn.cursor() as cur:
            for first in range(400, 1000, 200):
                cur.execute(bulk(first))
                cur.execute(f"UPDATE t SET n = n + 1 WHERE id BETWEEN {first - 200} AND {first}")
                conn.commit()
            cur.execute("DELETE FROM t WHERE id >= 900")
            conn.commit()
        _until("rows sent to the stopped workers", lambda: pool.in_flight() > 0, summary)
        os.kill(victim, signal.SIGKILL)
        _until("the pool to be broken", pool.broken, summary)
    finally:
        os.kill(other, signal.SIGCONT)  # the pool ends it (SIGTERM) once broken
    _ended(runtime, thread)

    (failed,) = summary
    assert failed.reason == "failed"
    assert isinstance(failed.error, SourceError)
    assert not failed.error.transient
    message = str(failed.error)
    assert re.search(r"\S+\.\d{6}:\d+", message), message  # names a binlog position
    assert f"{start.file}:{start.pos}" in message
    assert "BrokenProcessPool" in message
    assert "decode worker process ended abruptly" in message
    partial = _rows(uri)
    assert len(partial) == before  # nothing read after the last committed batch was written

    resumed = DestinationRuntime(WriteTerm("d", _config(mariadb, 2, 2712), layout))
    second = resumed.run(exit_when_idle_seconds=3)
    assert second.error is None
    assert second.resume is not None
    assert second.resume != failed.resume

    reference_layout = DestinationLake.at(lake_root, "reference")

    reference_uri = reference_layout.change_log
    _pin(reference_uri, start)
    reference = DestinationRuntime(WriteTerm("d", _config(mariadb, 1, 2713), reference_layout))
    assert reference.run(exit_when_idle_seconds=3).error is None
    one = _rows(reference_uri)
    assert len(one) == before + 3 * (200 + 201) + 100
    assert [r["seq"] for r in one] == list(range(1, len(one) + 1))
    assert partial == one[:before]
    assert _rows(uri) == one  # no row lost, none repeated


def _worker_processes() -> set[int]:
    """Processes under this one started from a multiprocessing fork server (the server
    itself and the decode workers it forks)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                ppid = int(stat.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue  # ended meanwhile
        children.setdefault(ppid, []).append(int(entry))
    found: set[int] = set()
    todo = [os.getpid()]
    while todo:
        for child in children.get(todo.pop(), []):
            todo.append(child)
            try:
                with open(f"/proc/{child}/cmdline", "rb") as cmdline:
                    if b"multiprocessing.forkserver" in cmdline.read():
                        found.add(child)
            except OSError:
                continue
    return found


def _watched_run(runtime: DestinationRuntime) -> tuple[RunSummary, bool, set[int]]:
    """Run until idle; whether the pool's workers were ever started during the run, and the
    fork-server processes that appeared meanwhile."""
    before = _worker_processes()
    thread, summary = _in_thread(runtime, idle=3)
    started, appeared, pool_seen = False, set[int](), False

    def ended() -> bool:  # watching the run meanwhile
        nonlocal started, appeared, pool_seen
        pool_seen = pool_seen or _pool(runtime) is not None
        started = started or _workers(runtime) is not None
        appeared |= _worker_processes() - before
        return not thread.is_alive()

    wait_for(ended, "the run to end when idle", timeout=3 * _WAIT, interval=0.02)
    _ended(runtime, thread)
    assert pool_seen, "the run had no decode pool to watch"
    return summary[0], started, appeared


def test_decode_workers_start_only_for_a_rows_event_above_the_inline_threshold(
    mariadb: MariaDBDatabase, lake_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(PASSWORD_ENV, mariadb.user.password)
    server, db = mariadb.server, mariadb.name
    start = server.binlog_position()
    server.execute("CREATE TABLE s (id INT PRIMARY KEY, v VARCHAR(20))", database=db)
    server.execute(*(f"INSERT INTO s VALUES ({i}, 'small {i}')" for i in range(40)), database=db)
    layout = DestinationLake.at(lake_root.parent, lake_root.name)
    uri = layout.change_log
    _pin(uri, start)

    small, started, appeared = _watched_run(
        DestinationRuntime(WriteTerm("d", _config(mariadb, 2, 2721), layout))
    )
    assert small.error is None
    assert len(_rows(uri)) == 1 + 40
    assert not started, "the pool started workers for small rows events only"
    assert not appeared, f"fork-server processes appeared: {sorted(appeared)}"

    values = ", ".join(f"({i}, 'bulk {i}')" for i in range(1000, 1200))
    assert 200 * len("bulk 1000") > DEFAULT_INLINE_BYTES  # one event above the threshold
    server.execute(f"INSERT INTO s VALUES {values}", database=db)
    bulk, started, appeared = _watched_run(
        DestinationRuntime(WriteTerm("d", _config(mariadb, 2, 2722), layout))
    )
    assert bulk.error is None
    assert len(_rows(uri)) == 1 + 40 + 200
    assert started, "the pool never started its workers for a rows event above the threshold"
    assert appeared, "no decode worker process appeared"
