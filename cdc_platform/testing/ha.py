"""Several `cdc-platform run` processes on one destination: start, kill, pause, observe, verify.

Shared by the HA integration tests and ``bench/failover.py``. Every wait polls a condition up
to a generous timeout and raises with the processes' log tails when it is not met, so a slow
machine makes a run slower, never red; only a wrong outcome fails.
"""

from __future__ import annotations

import ctypes
import itertools
import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from deltalake import DeltaTable

from cdc_platform.config.loader import load_platform
from cdc_platform.coordination.factory import open_lease, open_state_store
from cdc_platform.ha.lease import Lease
from cdc_platform.ha.members import HolderInfo
from cdc_platform.sink import Checkpoint, DeltaChangeLog
from cdc_platform.testing.destinations import PASSWORD_ENV, write_conf
from cdc_platform.testing.mariadb import MariaDBServer, ReplicationUser
from cdc_platform.testing.processes import wait_for
from cdc_platform.testing.replay import replay
from cdc_platform.testing.workload import source_rows

__all__ = [
    "Cluster",
    "Commit",
    "Node",
    "commit_history",
    "exactly_once_problems",
    "fast_database_lease",
    "fast_zookeeper_lease",
    "row_order_problems",
]


_SYS_PIDFD_GETFD = 438
"""pidfd_getfd(2)'s number, the same on every Linux architecture (Linux 5.6)."""


def fast_zookeeper_lease(
    hosts: str, *, switch_delay: float = 0.5, session_timeout: float = 2.0, liveness: bool = True
) -> str:
    """platform.yaml lease lines for tests: 2 s sessions (tickTime 500), short switch delay.

    The liveness listener is on unless ``liveness`` is False; only that case writes its key, so
    the lines also load in versions before it (``bench/failover.py --compare``).
    """
    lines = [
        "lease:",
        "  backend: zookeeper",
        f"  hosts: '{hosts}'",
        f"  session_timeout_seconds: {session_timeout:g}",
        f"  switch_delay_seconds: {switch_delay}",
    ]
    if not liveness:
        lines.append("  liveness: {enabled: false}")
    return "\n".join(lines) + "\n"


def fast_database_lease(
    url: str, *, password_env: str | None = None, expiry: float = 1.5, liveness: bool = True
) -> str:
    """platform.yaml lease lines for tests: expiry 1.5 s, renewal every 0.3 s; the liveness
    listener as in :func:`fast_zookeeper_lease`."""
    env = f"  password_env: {password_env}\n" if password_env else ""
    off = "" if liveness else "  liveness: {enabled: false}\n"
    return (
        "lease:\n"
        "  backend: database\n"
        f"  url: '{url}'\n"
        f"{env}"
        f"  expiry_seconds: {expiry:g}\n"
        "  renew_interval_seconds: 0.3\n"
        f"{off}"
    )


@dataclass
class Node:
    """One `cdc-platform run` process."""

    address: str
    proc: subprocess.Popen[bytes]
    log: Path

    @property
    def alive(self) -> bool:
        """True while the process runs (also while stopped by SIGSTOP)."""
        return self.proc.poll() is None

    def text(self) -> str:
        """Its log so far."""
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def signal(self, signum: int) -> None:
        """Send a signal to the process group."""
        if self.alive:
            os.killpg(self.proc.pid, signum)

    def shut_sockets(self, port: int) -> int:
        """Shut down, inside the running process, every TCP socket on local ``port`` (a
        listener and the connections it accepted), as if its listener had failed while the
        process lives on; how many. Linux's pidfd_getfd: this process may trace its child."""
        pidfd = os.pidfd_open(self.proc.pid)
        libc = ctypes.CDLL(None, use_errno=True)
        shut = 0
        try:
            for name in os.listdir(f"/proc/{self.proc.pid}/fd"):
                try:
                    if not os.readlink(f"/proc/{self.proc.pid}/fd/{name}").startswith("socket:"):
                        continue
                except OSError:
                    continue
                fd = libc.syscall(_SYS_PIDFD_GETFD, pidfd, int(name), 0)
                if fd < 0:
                    continue
                sock = socket.socket(fileno=fd)  # a duplicate: closing it leaves the original
                try:
                    if sock.type == socket.SOCK_STREAM and sock.getsockname()[1] == port:
                        sock.shutdown(socket.SHUT_RDWR)
                        shut += 1
                except (OSError, IndexError, TypeError):
                    pass
                finally:
                    sock.close()
        finally:
            os.close(pidfd)
        return shut

    def kill(self) -> None:
        """kill -9."""
        self.signal(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self, timeout: float = 60.0) -> int:
        """SIGTERM (after SIGCONT, in case it is paused) and wait for the exit code."""
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise


@dataclass(frozen=True, slots=True)
class Commit:
    """One change-log commit as its commit metadata says."""

    version: int
    batch_seq: int
    epoch: int
    rows: int


def commit_history(uri: str) -> list[Commit]:
    """The change log's own commits (not maintenance), oldest first."""
    history = DeltaTable(uri).history()
    found = [
        Commit(
            int(info["version"]),
            int(info["cdc.batch_seq"]),
            int(info["cdc.epoch"]),
            int(info.get("cdc.rows", 0)),
        )
        for info in history
        if "cdc.batch_seq" in info
    ]
    return sorted(found, key=lambda c: c.version)


def row_order_problems(uri: str) -> list[str]:
    """Rows in ``seq`` order must have non-decreasing batch_seq and epoch."""
    table = DeltaTable(uri).to_pyarrow_table(columns=["seq", "batch_seq", "epoch"])
    columns = [table.column(c).to_pylist() for c in ("seq", "batch_seq", "epoch")]
    rows = sorted(zip(*columns, strict=True))
    problems = []
    for (seq_a, batch_a, epoch_a), (seq_b, batch_b, epoch_b) in itertools.pairwise(rows):
        if batch_b < batch_a or epoch_b < epoch_a:
            problems.append(
                f"seq {seq_a} (batch {batch_a}, epoch {epoch_a}) before seq {seq_b} "
                f"(batch {batch_b}, epoch {epoch_b})"
            )
    return problems


def exactly_once_problems(server: MariaDBServer, database: str, uri: str) -> list[str]:
    """Replay the change log; every difference from the source (or duplicate, gap) is listed."""
    result = replay(uri)
    problems = [f"duplicate change {d}" for d in result.duplicates[:5]]
    problems += [f"seq gap {g}" for g in result.seq_gaps[:5]]
    problems += result.problems[:5]
    for table in ("customers", "orders"):
        expected = source_rows(server, database, table)
        actual = result.tables.get(f"{database}.{table}", {})
        if actual != expected:
            missing = sorted(set(expected) - set(actual))[:3]
            extra = sorted(set(actual) - set(expected))[:3]
            problems.append(
                f"{table}: {len(expected)} source rows vs {len(actual)} replayed; "
                f"missing {missing}, extra {extra}"
            )
    return problems


@dataclass
class Cluster:
    """A conf directory for one destination and the processes running it."""

    workdir: Path
    server: MariaDBServer
    user: ReplicationUser
    database: str
    lease_yaml: str
    destination: str = "ha"
    extra_env: dict[str, str] = field(default_factory=dict)
    lake_root: str | None = None
    """Where the lake is (default: ``workdir/lake``); an ``s3://`` lake is reached through the
    AWS variables of this process's environment, which the nodes inherit."""
    nodes: list[Node] = field(default_factory=list)
    _observer: Lease | None = None

    def __post_init__(self) -> None:
        self.conf = self.workdir / "conf"
        self.lake = self.lake_root or str(self.workdir / "lake")
        write_conf(
            self.conf,
            destination=self.destination,
            server=self.server,
            user=self.user,
            database=self.database,
            lake_root=self.lake,
        )
        (self.conf / "platform.yaml").write_text(f"lake_root: {self.lake}\n{self.lease_yaml}")
        self.uri = f"{self.lake.rstrip('/')}/{self.destination}/changes"
        self.env = {**os.environ, PASSWORD_ENV: self.user.password, **self.extra_env}

    # -- processes -------------------------------------------------------------------------------

    def start(self, address: str, *extra: str) -> Node:
        """Start `cdc-platform run --address ADDRESS` in its own process group."""
        log = self.workdir / f"{address}.log"
        with log.open("ab") as out:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "cdc_platform.cli",
                    "run",
                    "--conf",
                    str(self.conf),
                    "--destination",
                    self.destination,
                    "--address",
                    address,
                    "--metrics-interval",
                    "2",
                    *extra,
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self.env,
                start_new_session=True,
            )
        node = Node(address, proc, log)
        self.nodes.append(node)
        return node

    def close(self) -> None:
        """kill -9 whatever still runs; close the observer."""
        for node in self.nodes:
            if node.alive:
                node.signal(signal.SIGCONT)
                node.kill()
        if self._observer is not None:
            self._observer.close()
            self._observer = None

    def logs(self, lines: int = 25) -> str:
        """The tail of every node's log, for failure messages."""
        parts = []
        for node in self.nodes:
            tail = "\n".join(node.text().splitlines()[-lines:])
            parts.append(f"--- {node.address} (alive={node.alive}) ---\n{tail}")
        return "\n".join(parts)

    # -- observation -----------------------------------------------------------------------------

    def observer(self) -> Lease:
        """A lease object that only reads (never acquires)."""
        if self._observer is None:
            self._observer = open_lease(load_platform(self.conf), self.conf, self.destination)
        return self._observer

    def holder(self) -> HolderInfo | None:
        """The lease holder now, or None (also when the store cannot be read)."""
        try:
            return self.observer().holder()
        except Exception:
            return None

    def state(self, key: str) -> dict[str, Any] | None:
        """A state-watch entry (``status/<destination>``, ...) as published, or None."""
        store = open_state_store(load_platform(self.conf), self.conf)
        try:
            entry = store.get(key)
        except Exception:
            return None
        finally:
            store.close()
        if entry is None:
            return None
        value: dict[str, Any] = json.loads(entry.value)
        return value

    def checkpoint(self) -> Checkpoint | None:
        """The change log's checkpoint, or None before the table exists."""
        try:
            sink = DeltaChangeLog(self.uri, self.destination)
            try:
                return sink.recover()
            finally:
                sink.close()
        except Exception:
            return None

    def rows(self) -> int:
        """Rows in the change log (0 before it exists)."""
        checkpoint = self.checkpoint()
        return checkpoint.last_seq if checkpoint is not None else 0

    def wait(self, predicate: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
        """:func:`wait_for` with the nodes' logs as diagnostics."""
        wait_for(predicate, what, timeout=timeout, diagnose=self.logs)

    def wait_holder(self, node: Node, *, above: int = -1, timeout: float = 60.0) -> HolderInfo:
        """Wait until ``node`` holds the lease with an epoch above ``above``."""
        found: list[HolderInfo] = []

        def held() -> bool:
            holder = self.holder()
            if holder is not None and holder.address == node.address and holder.epoch > above:
                found.append(holder)
                return True
            return False

        self.wait(held, f"{node.address} to hold the lease above epoch {above}", timeout)
        return found[-1]

    def wait_claimed(self, epoch: int, timeout: float = 60.0) -> None:
        """Wait until the change log's newest commit is of ``epoch`` (the holder claimed it)."""

        def claimed() -> bool:
            checkpoint = self.checkpoint()
            return checkpoint is not None and checkpoint.epoch >= epoch

        self.wait(claimed, f"the change log to carry epoch {epoch}", timeout)

    def wait_rows_beyond(self, seq: int, timeout: float = 60.0) -> int:
        """Wait until rows past ``seq`` were committed; the new last seq."""
        self.wait(lambda: self.rows() > seq, f"rows beyond seq {seq}", timeout)
        return self.rows()

    def wait_caught_up(self, timeout: float = 90.0) -> None:
        """Wait until the change log replays to the source (after the workload stopped)."""
        last: list[str] = []

        def equal() -> bool:
            try:
                last[:] = exactly_once_problems(self.server, self.database, self.uri)
            except Exception as exc:
                last[:] = [repr(exc)]
            return not last

        wait_for(
            equal,
            "the change log to replay to the source",
            timeout=timeout,
            interval=0.5,
            diagnose=lambda: f"{last}\n{self.logs()}",
        )
