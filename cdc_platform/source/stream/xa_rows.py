"""The rows of prepared XA transactions, held in memory up to a byte budget and spilled to a
local file beyond it.

A prepared transaction may stay prepared for hours (until someone runs ``XA COMMIT``), and
its rows must be kept until then; the budget bounds what every prepared transaction of one
stream keeps in memory together. Spilled rows go to an anonymous temporary file (the system
removes it when the process ends, killed or not); they are read back, in order, at the
``XA COMMIT`` that emits them.
"""

from __future__ import annotations

import os
import pickle
import tempfile
from collections.abc import Iterable, Iterator
from typing import IO

from cdc_platform.events import ChangeEvent

__all__ = ["DEFAULT_XA_MEMORY_BYTES", "XaBudget", "XaRows"]

DEFAULT_XA_MEMORY_BYTES = 64 * 1024 * 1024
"""What the held rows of all prepared XA transactions of one stream keep in memory at most."""


class XaBudget:
    """The memory budget shared by the prepared transactions of one stream."""

    def __init__(self, limit_bytes: int, spill_dir: str | None = None) -> None:
        self.limit_bytes = limit_bytes
        self.spill_dir = spill_dir
        """Where spill files go (None: the system's temporary directory)."""
        self.in_memory = 0


def _spill_file(directory: str | None) -> IO[bytes]:
    """A new file, removed from its directory at once: it lives while it is open (its name,
    ``cdc-xa-...``, still shows in ``/proc/<pid>/fd``)."""
    fd, path = tempfile.mkstemp(prefix="cdc-xa-", dir=directory)
    os.unlink(path)
    return os.fdopen(fd, "w+b")


class XaRows:
    """The rows of one prepared transaction, in order: the first in memory while the shared
    budget allows, the rest pickled into a temporary file."""

    def __init__(self, budget: XaBudget, rows: Iterable[ChangeEvent] = ()) -> None:
        self._budget = budget
        self._memory: list[ChangeEvent] = []
        self._memory_bytes = 0
        self._file: IO[bytes] | None = None
        self._spilled = 0
        self.extend(rows)

    def extend(self, rows: Iterable[ChangeEvent]) -> None:
        for row in rows:
            size = max(row.size, 1)
            if self._file is None and self._budget.in_memory + size <= self._budget.limit_bytes:
                self._memory.append(row)
                self._memory_bytes += size
                self._budget.in_memory += size
                continue
            if self._file is None:
                self._file = _spill_file(self._budget.spill_dir)
            self._file.seek(0, 2)  # a read may have stopped midway
            pickle.dump(row, self._file, protocol=pickle.HIGHEST_PROTOCOL)
            self._spilled += 1

    @property
    def spilled(self) -> int:
        """How many rows are in the spill file."""
        return self._spilled

    def first_index(self) -> int | None:
        """The index (in its transaction) of the first row held, None when empty."""
        return next((row.index for row in self), None)

    def __len__(self) -> int:
        return len(self._memory) + self._spilled

    def __iter__(self) -> Iterator[ChangeEvent]:
        yield from self._memory
        if self._file is None:
            return
        self._file.flush()
        self._file.seek(0)
        for _ in range(self._spilled):
            yield pickle.load(self._file)  # noqa: S301 (our own file, written above)

    def close(self) -> None:
        """Give back the memory and remove the spill file (the transaction was resolved)."""
        self._budget.in_memory -= self._memory_bytes
        self._memory, self._memory_bytes = [], 0
        if self._file is not None:
            self._file.close()
            self._file = None
        self._spilled = 0
