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

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["ReadAhead"]

T = TypeVar("T")


class ReadAhead(Generic[T]):
    """At most one read running ahead; :meth:`take` its result, :meth:`discard` it."""

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None
        self._result: list[T] = []
        self._error: list[BaseException] = []

    def start(self, read: Callable[[], T]) -> None:
        """Run ``read`` in a thread now (the previous one must have been taken)."""
        if self._thread is not None:
            raise RuntimeError("a read is already running ahead")

        def run() -> None:
            try:
                self._result.append(read())
            except BaseException as exc:  # handed to the caller's thread by take()
                self._error.append(exc)

        self._thread = threading.Thread(target=run, name="snapshot-read-ahead", daemon=True)
        self._thread.start()

    def take(self) -> T | None:
        """The result of the read started last (waits for it; raises its error), or None
        when none was started."""
        thread = self._thread
        if thread is None:
            return None
        thread.join()
        self._thread = None
        if self._error:
            raise self._error.pop()
        return self._result.pop()

    def discard(self) -> None:
        """Wait for a read still running and drop its result and error: its connection is
        the caller's, idle again on return."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self._result.clear()
        self._error.clear()
