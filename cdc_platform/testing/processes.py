"""Shared plumbing for private server processes: free ports, readiness waits, clean stops."""

from __future__ import annotations

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

__all__ = [
    "ServerStartError",
    "child_setup",
    "die_with_parent",
    "find_binary",
    "free_port",
    "stop_process",
    "wait_until",
]


class ServerStartError(RuntimeError):
    """A private server did not come up; the message carries the tail of its log."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the kernel picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


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


def wait_until(
    probe: Callable[[], bool], *, timeout: float, what: str, log: Path | None = None
) -> None:
    """Call ``probe`` until it returns True; on timeout raise with the log tail."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if probe():
            return
        time.sleep(0.05)
    tail = tail_of(log) if log is not None else ""
    raise ServerStartError(f"{what} not ready after {timeout:.0f} s\n{tail}")


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
