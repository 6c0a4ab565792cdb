"""The mirrors of one destination: the service the Dagster assets and the Airflow operators call.

Both faces apply the change log to mirrors and build tables as of a day. Which tables, whether
a table waits for its re-read after DDL (the list in the lake, :mod:`cdc_platform.backfill`),
where each mirror and day's table lives and which figures are reported are decided here once:
each face calls :class:`DestinationMirrors` in one line and takes its event metadata from
:meth:`AppliedMirror.metadata` / :meth:`DailyHistory.metadata`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import date

from pyspark.sql import SparkSession

from cdc_platform.backfill.reread_list import pending_rereads
from cdc_platform.config import ConfigSet
from cdc_platform.sink.destination_lake import DestinationLake
from cdc_platform.source.filters import TableFilter
from cdc_platform.spark.history import DailyTableStats, daily_change_stats, mirror_as_of
from cdc_platform.spark.locations import mirror_tables, mirror_uri
from cdc_platform.spark.mirror import apply_changes
from cdc_platform.spark.mirror_result import MirrorResult
from cdc_platform.spark.target import MirrorTarget

__all__ = ["AppliedMirror", "DailyHistory", "DestinationMirrors"]


@dataclass(frozen=True, slots=True)
class AppliedMirror:
    """One table's apply: which table, what it did, and whether it waits for a re-read."""

    db: str
    table: str
    result: MirrorResult
    held: bool
    """A re-read after DDL is under way: the mirror stays before that DDL."""

    @property
    def has_table(self) -> bool:
        """Whether there is a mirror to read: false while the change log holds no row and no
        definition of the table (its mirror appears with its first change)."""
        return self.result.mirror_version is not None or self.result.dropped is not None

    def metadata(self) -> dict[str, int | float | str | bool | None]:
        """The apply's figures (:meth:`MirrorResult.metadata`) with the mirror's row count,
        URI and whether it waits for a re-read (``rereading``)."""
        return {
            **self.result.metadata(),
            "row_count": self.result.mirror_rows,
            "uri": self.result.mirror_uri,
            "rereading": self.held,
        }


@dataclass(frozen=True, slots=True)
class DailyHistory:
    """One table's day: its state at the end of the day and the day's change figures."""

    db: str
    table: str
    day: date
    result: MirrorResult
    """The as-of-day table written (``mirror_uri``, ``mirror_rows``)."""
    stats: DailyTableStats | None
    """The day's change-log rows of the table by kind (None: none that day)."""

    def metadata(self) -> dict[str, int | float | str]:
        """The day, the table written (URI, rows, newest seq) and the day's change figures
        (zero when the change log has none of the table that day)."""
        figures = self.stats
        return {
            "day": self.day.isoformat(),
            "uri": self.result.mirror_uri,
            "row_count": self.result.mirror_rows,
            "last_seq": self.result.last_seq,
            "inserts": figures.inserts if figures else 0,
            "updates": figures.updates if figures else 0,
            "deletes": figures.deletes if figures else 0,
            "snapshots": figures.snapshots if figures else 0,
            "ddl": figures.ddl if figures else 0,
            "rows": figures.rows if figures else 0,
            "bytes": figures.bytes if figures else 0,
            "max_lag_seconds": figures.max_lag_seconds if figures else 0.0,
        }


class DestinationMirrors:
    """The mirrors of the destination ``lake`` lays out, worked on with ``session``."""

    def __init__(
        self,
        lake: DestinationLake,
        session: SparkSession,
        transient: Callable[[str, str], bool] | None = None,
    ) -> None:
        """``transient``: the tables never mirrored as new tables of the change log (a schema
        tool's, followed into their table: docs/ddl.md); none when not given."""
        self.lake = lake
        self.session = session
        self.transient = transient or (lambda _db, _table: False)

    @classmethod
    def of(
        cls, configset: ConfigSet, destination: str, session: SparkSession
    ) -> DestinationMirrors:
        """The mirrors of a valid destination of ``configset`` (KeyError for any other)."""
        config = configset.destinations[destination].config
        source = TableFilter(config.source.include_tables, config.source.exclude_tables)
        return cls(DestinationLake.of(configset, destination), session, source.transient)

    def target(self, db: str, table: str) -> MirrorTarget:
        """The mirror of ``db.table``."""
        return MirrorTarget.of(self.lake, db, table)

    def rereading(self) -> set[str]:
        """``db.table`` names whose re-read after DDL is not done yet."""
        lake = self.lake
        return pending_rereads(lake)

    def apply(
        self, tables: Sequence[tuple[str, str]], *, with_new_tables: bool = False
    ) -> Iterator[AppliedMirror]:
        """Apply the change log to each ``(db, table)``'s mirror, in order; with
        ``with_new_tables`` also to tables the change log holds beyond them. A table whose
        re-read after DDL is under way is applied up to that DDL (``held``)."""
        rereading = self.rereading()
        todo = list(tables)
        if with_new_tables:
            known = set(todo)
            found = mirror_tables(self.session, self.lake.change_log, self.lake.storage_options)
            todo += [t for t in found if t not in known and not self.transient(*t)]
        for db, table in todo:
            held = f"{db}.{table}" in rereading
            result = apply_changes(self.session, self.target(db, table), held=held)
            yield AppliedMirror(db, table, result, held)

    def history(self, day: date, tables: Sequence[tuple[str, str]]) -> Iterator[DailyHistory]:
        """Write each ``(db, table)``'s state as of the end of ``day`` (UTC) under the
        destination's history root, with the day's figures (one pass over the change log)."""
        changes = daily_change_stats(self.session, self.lake.change_log, day)
        stats = {(s.db, s.table): s for s in changes}
        day_root = self.lake.history_root(day)
        for db, table in tables:
            target = mirror_uri(day_root, db, table)
            result = mirror_as_of(self.session, self.target(db, table), day, target)
            yield DailyHistory(db, table, day, result, stats.get((db, table)))
