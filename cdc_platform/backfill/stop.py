"""Interrupting side work (a snapshot, a repair) at once when its lease goes.

A side writer checks its commit gate only before a commit. A read blocked on the source (a
partition, a table lock) would end only at the connection's read timeout, long after the
lease is gone. :class:`SideWorkStop` is what the lease-loss callback (or a stop request)
triggers: it marks the work stopped and shuts the socket of its source connection down, so
the blocked read fails now; the work then raises LeaseLostError with the reason and never
commits again.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from typing import Any

import pymysql

from cdc_platform.errors import LeaseLostError
from cdc_platform.source.library_internals import socket_of

__all__ = ["SideWorkStop"]


class SideWorkStop:
    """Interrupts side work of one destination from another thread (a lease callback)."""

    def __init__(self, destination: str, epoch: int | None, *, work: str = "side work") -> None:
        self.destination = destination
        self.epoch = epoch
        self.work = work
        """What is interrupted ("repair", "snapshot"), for the error message."""
        self._lock = threading.Lock()
        self._reason: str | None = None
        self._conn: pymysql.connections.Connection[Any] | None = None

    @property
    def reason(self) -> str | None:
        """Why the work was stopped, or None while it may go on."""
        return self._reason

    def attach(self, conn: pymysql.connections.Connection[Any] | None) -> None:
        """The connection to cut on a stop (None: detach); cut at once if already stopped."""
        with self._lock:
            self._conn = conn
            stopped = self._reason is not None
        if stopped and conn is not None:
            _cut(conn)

    def request_stop(self, reason: str) -> None:
        """Stop the work now (idempotent; quick: callable from a lease callback)."""
        with self._lock:
            if self._reason is None:
                self._reason = reason
            conn = self._conn
        if conn is not None:
            _cut(conn)

    def error(self) -> LeaseLostError:
        """The error the interrupted work raises."""
        return LeaseLostError(
            self.destination, self.epoch, f"{self.work} interrupted: {self._reason or 'stopped'}"
        )

    def check(self) -> None:
        """Raise :meth:`error` if a stop was requested."""
        if self._reason is not None:
            raise self.error()


def _cut(conn: pymysql.connections.Connection[Any]) -> None:
    """Shut a connection's socket down: a read blocked on it returns with an error."""
    sock = socket_of(conn)
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
