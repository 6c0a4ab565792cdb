"""What a snapshot reports: its progress after every committed chunk, and its summary; and
who it reports to (:class:`SnapshotObservers`).

Their own module so that the readers of a snapshot's progress (the CLI, the runtime's
heartbeat, Dagster observations) need not know how it runs; :mod:`.snapshot` re-exports them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from cdc_platform.events import ResumePosition
from cdc_platform.sink.snapshot_state import SnapshotState, TableCounts

__all__ = ["SnapshotObservers", "SnapshotProgress", "SnapshotResult"]


@dataclass
class SnapshotProgress:
    """Reported after every committed chunk (the CLI prints it; tests count chunks)."""

    table: str
    table_index: int
    tables: int
    chunks: int
    rows_read: int
    rows_written: int
    rows_dropped: int
    estimated_rows: int
    batch_seq: int
    seconds: float
    chunk_rows: int = 0
    """Rows the last chunk read (its size adapts to a time per chunk unless fixed)."""

    @classmethod
    def of_table(cls, state: SnapshotState, table: str, estimated: int) -> SnapshotProgress:
        """The progress of ``table`` so far: what ``state`` kept from before an interruption
        (its ``progress``, read by :mod:`cdc_platform.sink.snapshot_progress`), with the new
        estimate (kept in ``state`` too)."""
        tally = cls(table, state.index, len(state.tables), *[0] * 7)
        kept = state.progress.setdefault(table, TableCounts())
        tally.rows_read = kept.rows_read
        tally.chunks = kept.chunks
        tally.estimated_rows = kept.estimated_rows = estimated
        return tally

    @property
    def done_fraction(self) -> float:
        """0..1: tables done plus the current table's share of its estimated rows."""
        if self.tables <= 0:
            return 1.0
        share = min(1.0, self.rows_read / self.estimated_rows) if self.estimated_rows > 0 else 0.0
        return min(1.0, (self.table_index + share) / self.tables)


@dataclass
class SnapshotResult:
    """What one run of the snapshot did."""

    tables: list[str]
    chunks: int = 0
    rows_written: int = 0
    rows_dropped: int = 0
    streamed_events: int = 0
    resumed: bool = False
    seconds: float = 0.0
    last_batch_seq: int = 0
    resume: ResumePosition | None = None
    per_table: dict[str, int] = field(default_factory=dict)
    ended: dict[str, str] = field(default_factory=dict)
    """Tables whose snapshot ended without copying them (dropped, renamed, no key), and why."""


@dataclass(frozen=True, slots=True)
class SnapshotObservers:
    """Who a snapshot run tells how it goes, and the clock it times its chunks with."""

    on_progress: Callable[[SnapshotProgress], None] | None = None
    """Called after every committed chunk."""
    on_table_done: Callable[[str, str | None], None] | None = None
    """Called when a table is done: its name, and why it ended uncopied (None: copied)."""
    clock: Callable[[], float] = time.perf_counter
    """Times each chunk for the adaptive chunk size (:mod:`.chunk_sizing`); tests drive it."""
