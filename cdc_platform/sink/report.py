"""What observers hear of each commit to a change log (the CLI log, Dagster materializations).

Its own module because every writer of the change log reports the same way: the streaming
runtime, the snapshot and the repair writer beside it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from cdc_platform.events import ChangeEvent, Op, ResumePosition

__all__ = ["CommitReport", "ddl_rows"]


def ddl_rows(events: Iterable[ChangeEvent]) -> tuple[tuple[str, str, str], ...]:
    """``(db, table, statement)`` of each DDL row among ``events``."""
    return tuple((e.db, e.table, e.ddl) for e in events if e.op is Op.DDL and e.ddl is not None)


@dataclass(frozen=True, slots=True)
class CommitReport:
    """One committed batch, as reported to observers (CLI log, Dagster materializations)."""

    destination: str
    batch_seq: int
    version: int
    rows: int
    events: int
    resume: ResumePosition
    epoch: int
    lag_seconds: float
    """Commit time minus the binlog timestamp of the batch's last transaction."""
    commit_seconds: float
    partial: bool
