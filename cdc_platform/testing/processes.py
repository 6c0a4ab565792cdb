"""Shared plumbing for private server processes: free ports, readiness waits, clean stops."""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import ClassVar, Self, TypeVar

__all__ = [
    "PORT_TRIES",
    "PrivateServer",
    "ServerStartError",
    "child_setup",
    "die_with_parent",
    "find_binary",
    "free_port",
    "group_members",
    "let_time_pass",
    "start_on_a_free_port",
    "stop_process",
    "stop_process_group",
    "wait_for",
    "wait_until",
]


_T = TypeVar("_T")


class ServerStartError(RuntimeError):
    """A private server did not come up; the message carries the tail of its log."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the kernel picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


PORT_TRIES = 3
"""First starts on a port chosen by :func:`free_port` that another process took first."""


def start_on_a_free_port(
    start_once: Callable[[], None], move: Callable[[], None], *, tries: int = PORT_TRIES
) -> None:
    """``start_once()``, calling ``move()`` (choose another port) and starting again when it
    failed because its port was in use, up to ``tries`` starts.

    :func:`free_port` returns a port that was free a moment ago: another process can bind it
    before the server does (it happened: a test worker's whole session lost its server). A
    caller passes ``tries=1`` where the address must not change (a restart, a port it was
    given)."""
    for attempt in range(tries):
        try:
            start_once()
        except ServerStartError as exc:
            if attempt + 1 < tries and _port_taken(str(exc)):
                move()
                continue
            raise
        return


class PrivateServer:
    """What the tests' private servers share: a port on 127.0.0.1 (:func:`free_port`'s unless
    one is given) and a start that moves to another port when a first start on a port chosen
    here finds it taken (:func:`start_on_a_free_port`); later starts keep the address."""

    START_TIMEOUT: ClassVar[float] = 60.0
    """Seconds a start may take unless the caller says otherwise."""
    STOP_SIGNAL: ClassVar[signal.Signals] = signal.SIGTERM
    """How :meth:`stop` asks the server to end (PostgreSQL's fast shutdown is SIGINT)."""
    STOP_TIMEOUT: ClassVar[float] = 15.0
    """Seconds :meth:`stop` waits after each signal before the next (SIGTERM, SIGKILL)."""

    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self._port_may_move = port is None
        self._proc: subprocess.Popen[bytes] | None = None
        """The server process while started (set by :meth:`_start_once`)."""

    def start(self, timeout: float | None = None) -> None:
        """Start the server (:meth:`_start_once`) and wait until it serves."""
        seconds = self.START_TIMEOUT if timeout is None else timeout
        tries = PORT_TRIES if self._port_may_move else 1
        start_on_a_free_port(lambda: self._start_once(seconds), self._move, tries=tries)
        self._port_may_move = False

    def _move(self) -> None:
        self.port = free_port()

    def _start_once(self, timeout: float) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        """Stop cleanly: :attr:`STOP_SIGNAL`, then SIGTERM and SIGKILL if it hangs
        (:func:`stop_process`, :attr:`STOP_TIMEOUT` seconds each); returns once it ended."""
        if self._proc is not None:
            if self.STOP_SIGNAL is not signal.SIGTERM and self._proc.poll() is None:
                self._proc.send_signal(self.STOP_SIGNAL)
            stop_process(self._proc, timeout=self.STOP_TIMEOUT)
            self._proc = None

    def kill(self) -> None:
        """kill -9: a crash, for outage and failure tests (returns once it ended)."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait(timeout=30.0)
        self._proc = None

    def restart(self) -> None:
        """:meth:`stop`, then :meth:`start` on the same port and data directory."""
        self.stop()
        self.start()

    @property
    def running(self) -> bool:
        """True while the server process is alive."""
        return self._proc is not None and self._proc.poll() is None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


_PORT_TAKEN = ("address already in use", "failed to bind to address", "port allocation failed")
"""How a start that lost its port says so: the system's message (MariaDB, ZooKeeper,
PostgreSQL), Spark's (which names the address instead) and SeaweedFS's (which checks its
ports before it binds them)."""


def _port_taken(error: str) -> bool:
    """Whether a server's start failed on its port (:data:`_PORT_TAKEN`)."""
    text = error.lower()
    return any(message in text for message in _PORT_TAKEN)


def find_binary(name: str, *extra_dirs: str) -> str:
    """Locate a server binary on PATH or in the Debian locations, or say how to install it."""
    found = shutil.which(name) or shutil.which(
        name, path=os.pathsep.join(("/usr/sbin", *extra_dirs))
    )
    if found is None:
        raise ServerStartError(
            f"{name} not found on PATH or in /usr/sbin; run scripts/setup.sh to install the "
            "Debian packages the tests and the demo need"
        )
    return found


def wait_for(
    probe: Callable[[], _T],
    what: str,
    *,
    timeout: float = 60.0,
    interval: float = 0.05,
    slowing_to: float | None = None,
    diagnose: Callable[[], str] | None = None,
) -> _T:
    """The one wait of the tests: call ``probe`` until it returns a true value, and return it.

    A slow machine makes a wait longer, never red: ``timeout`` is generous and only its
    expiry fails, with an :class:`AssertionError` naming ``what`` and, when given,
    ``diagnose()``'s text (log tails, the last state seen). ``probe`` may raise to end the
    wait early (a thread or process it watches ended). Polls every ``interval`` seconds,
    growing by half each time up to ``slowing_to`` when given (for probes that cost a read of
    a storage)."""
    deadline = time.monotonic() + timeout
    pause = interval
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() >= deadline:
            break
        time.sleep(pause)
        if slowing_to is not None:
            pause = min(pause * 1.5, slowing_to)
    detail = f"\n{diagnose()}" if diagnose is not None else ""
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}{detail}")


def let_time_pass(seconds: float, *, because: str) -> None:
    """Let ``seconds`` of real time pass, where time passing is the point of a test and no
    clock can be injected (a ZooKeeper server's session clock, file ages a library compares
    with the wall clock, a stand-in's work that must still be running when a signal comes).
    ``because`` names the clock that must move; never use this to wait for a condition
    (:func:`wait_for` does that)."""
    del because  # documentation at the call site
    time.sleep(seconds)


def wait_until(
    probe: Callable[[], bool], *, timeout: float, what: str, log: Path | None = None
) -> None:
    """:func:`wait_for` a server to be ready; on timeout :class:`ServerStartError` with the
    tail of its log (a start that lost its port says so there)."""
    try:
        wait_for(probe, f"{what} to be ready", timeout=timeout)
    except AssertionError as exc:
        tail = tail_of(log) if log is not None else ""
        raise ServerStartError(f"{what} not ready after {timeout:.0f} s\n{tail}") from exc


def tail_of(path: Path, lines: int = 40) -> str:
    """The last lines of a log file, or a note that it does not exist."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return f"(no log at {path})"
    return "\n".join(text.splitlines()[-lines:])


def stop_process(proc: subprocess.Popen[bytes], *, timeout: float = 15.0) -> None:
    """SIGTERM, wait, then SIGKILL: a server must never outlive its fixture."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=timeout)


def group_members(pgid: int) -> list[int]:
    """Pids of the live processes of process group ``pgid`` (zombies excluded), from /proc."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue  # ended while we looked
        # "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses.
        fields = text[text.rindex(")") + 2 :].split()
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(stat.parent.name))
    return members


def stop_process_group(
    proc: subprocess.Popen[bytes], *, grace: float = 15.0, timeout: float = 15.0
) -> list[int]:
    """Stop the process group ``proc`` leads (it was started with ``start_new_session``):
    SIGTERM to the group, ``grace`` seconds to end, then SIGKILL to whatever is left.

    Children a leader started without a session of their own are in its group; some ignore
    SIGTERM (Dagster's code servers map it to an interrupt they only record) and would
    outlive the test. Returns the pids still alive after ``timeout`` more seconds (none
    normally), for the caller to assert on.
    """
    pgid = proc.pid
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        proc.poll()  # reap the leader: a zombie would otherwise count as alive
        if not group_members(pgid):
            break
        time.sleep(0.1)
    if group_members(pgid):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        proc.poll()
        left = group_members(pgid)
        if not left:
            # the leader may have died between the poll and the listing: reap it
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=max(deadline - time.monotonic(), 0.1))
            return []
        time.sleep(0.1)
    return group_members(pgid)


def die_with_parent() -> None:
    """`preexec_fn` for a test's long-lived child: SIGTERM it when the test process dies.

    A test killed by a timeout never runs its fixture teardown, and a child started in its
    own session would otherwise run forever. Linux only (prctl PR_SET_PDEATHSIG); the signal
    follows the *thread* that started the child, so use it only from the main thread.
    """
    libc = ctypes.CDLL(None, use_errno=True)
    pr_set_pdeathsig = 1
    libc.prctl(pr_set_pdeathsig, signal.SIGTERM)


def child_setup() -> Callable[[], None] | None:
    """:func:`die_with_parent` when called from the main thread, else nothing.

    A server restarted from a helper thread (failure tests do that) must not die when that
    thread ends, so only main-thread starts get the parent-death signal.
    """
    return die_with_parent if threading.current_thread() is threading.main_thread() else None
