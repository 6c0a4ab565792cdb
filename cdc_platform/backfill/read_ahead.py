"""One read run ahead in a thread while the caller does something else (a chunk's commit).

A snapshot chunk's time is mostly its read (the source's SELECT, the rows' conversion) and
its Delta commit (Arrow, Parquet, the log), one after the other. The commit and the
source's work on the SELECT run largely outside the interpreter lock, so reading the next
chunk while the last one commits hides much of one behind the other. The caller keeps
the order of effects: what the read does (a SELECT, the high watermark on the same
connection) is decided when it is started, and its result, or its error, is taken in the
caller's thread as if the read had run there.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Generic, TypeVar

__all__ = ["ReadAhead"]

T = TypeVar("T")


class ReadAhead(Generic[T]):
    """At most one read running ahead; :meth:`take` its result, :meth:`discard` it,
    :meth:`close` at the end. One worker thread serves every read (starting a thread per
    read made each chunk wait for the new thread to get the interpreter lock)."""

    def __init__(self) -> None:
        self._pool: ThreadPoolExecutor | None = None
        self._running: Future[T] | None = None

    def start(self, read: Callable[[], T]) -> None:
        """Run ``read`` in the worker thread now (the previous one must have been taken)."""
        if self._running is not None:
            raise RuntimeError("a read is already running ahead")
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="snapshot-read-ahead")
        self._running = self._pool.submit(read)

    def take(self) -> T | None:
        """The result of the read started last (waits for it; raises its error), or None
        when none was started."""
        running, self._running = self._running, None
        return None if running is None else running.result()

    def discard(self) -> None:
        """Wait for a read still running and drop its result and error: its connection is
        the caller's, idle again on return."""
        running, self._running = self._running, None
        if running is not None:
            running.exception()  # waits; the error is dropped with the result

    def close(self) -> None:
        """:meth:`discard`, then end the worker thread."""
        self.discard()
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
