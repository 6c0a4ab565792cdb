"""What one mirror apply or as-of build did: the figures both faces report.

Returned by :func:`.mirror.apply_changes` and :func:`.history.mirror_as_of`; its
:meth:`MirrorResult.metadata` is the one set of plain values the Dagster assets and the
Airflow operators attach to their events.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

__all__ = ["MirrorResult"]


@dataclass(frozen=True, slots=True)
class MirrorResult:
    """What one apply (or as-of build) did.

    Counts are the net effect per key of the applied changes: a key first seen as an insert
    and still present counts as inserted, an existing key still present as updated, an
    existing key gone as deleted; a key inserted and deleted within the range counts as none.
    A rebuild counts every row it wrote as inserted.
    """

    db: str
    table: str
    mirror_uri: str
    mode: Literal["noop", "merge", "rebuild", "as_of"]
    previous_seq: int
    """seq the mirror reflected before (as_of: seq of the mirror version it started from, or of
    the last TRUNCATE / DROP TABLE; 0 when it replayed the whole history)."""
    last_seq: int
    """Newest change-log seq of the table the mirror reflects."""
    changes: int
    """Change-log rows (c/u/d/r) read for this apply."""
    rows_inserted: int
    rows_updated: int
    rows_deleted: int
    mirror_rows: int
    change_log_version: int | None
    mirror_version: int | None
    seconds: float
    columns: tuple[str, ...] = ()
    last_ts: datetime | None = None
    """Binlog timestamp of the newest change applied in this call (None when none was)."""
    dropped: str | None = None
    """Why the source table no longer exists ("dropped", "renamed to db.t", "database
    dropped"): the mirror is empty and no longer current. None while the table exists."""

    def metadata(self) -> dict[str, int | float | str | None]:
        """Plain values for asset metadata (Dagster charts numeric ones over time).

        ``lag_seconds`` is how old the newest applied change was when the apply finished:
        source commit to mirror, the end-to-end freshness of the mirror.
        """
        lag = None
        if self.last_ts is not None:
            lag = round((datetime.now(UTC) - self.last_ts).total_seconds(), 3)
        return {
            "mode": self.mode,
            "mirror_rows": self.mirror_rows,
            "rows_inserted": self.rows_inserted,
            "rows_updated": self.rows_updated,
            "rows_deleted": self.rows_deleted,
            "changes": self.changes,
            "last_seq": self.last_seq,
            "change_log_version": self.change_log_version,
            "mirror_version": self.mirror_version,
            "dropped": self.dropped,
            "lag_seconds": lag,
            "seconds": round(self.seconds, 3),
        }
