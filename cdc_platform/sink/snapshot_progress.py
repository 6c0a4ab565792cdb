"""A snapshot's progress per table, as anyone may read it: `status`, metrics, Dagster.

The snapshot runner (:mod:`cdc_platform.backfill.snapshot`) keeps its state
(:class:`~.snapshot_state.SnapshotState`) in the destination's ``_snapshot_state.json``
(:class:`~.destination_lake.DestinationLake`) and writes it at every chunk; its
``progress`` part holds, per table, the rows read so far, the estimate
(``information_schema.TABLES.TABLE_ROWS``, an InnoDB estimate that may be off by tens of
percent, so the percent is capped at 99 until the table is done) and the chunks committed.
This module reads that file without the runner, from the bottom layer, so every reader sees
one format. No file: no snapshot in progress.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, Literal

from cdc_platform.sink.lake_files import LakeFile
from cdc_platform.sink.snapshot_state import SnapshotState, TableCounts

__all__ = ["TableProgress", "progress_of_state", "read_snapshot_progress"]

TableState = Literal["waiting", "copying", "done", "ended"]


@dataclass(frozen=True, slots=True)
class TableProgress:
    """One table of a snapshot in progress."""

    table: str
    state: TableState
    rows_read: int
    estimated_rows: int
    chunks: int

    @property
    def percent(self) -> float:
        """Rows read of the estimate, 100 once done (at most 99 before: the estimate is
        only an estimate)."""
        if self.state in ("done", "ended"):
            return 100.0
        if self.estimated_rows <= 0:
            return 0.0
        return min(99.0, 100.0 * self.rows_read / self.estimated_rows)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form, with the percent."""
        return {**asdict(self), "percent": round(self.percent, 1)}


def progress_of_state(stored: Mapping[str, Any]) -> list[TableProgress]:
    """The per-table progress in a stored snapshot state (see the module docstring)."""
    state = SnapshotState.from_json(stored)
    index, ended = state.index, state.ended
    out: list[TableProgress] = []
    for position, table in enumerate(state.tables):
        counts = state.progress.get(table, TableCounts())
        table_state: TableState
        if table in ended:
            table_state = "ended"
        elif position < index:
            table_state = "done"
        elif position == index:
            table_state = "copying"
        else:
            table_state = "waiting"
        out.append(
            TableProgress(
                table, table_state, counts.rows_read, counts.estimated_rows, counts.chunks
            )
        )
    return out


def read_snapshot_progress(state_file: LakeFile) -> list[TableProgress]:
    """The progress of the snapshot whose state is ``state_file``; [] when none runs."""
    state = state_file.read_json()
    return [] if not isinstance(state, dict) else progress_of_state(state)
