"""How far each mirror is behind its change log, read without Spark (delta-rs + DataFusion).

A mirror is fresh when every change of its table in the change log is applied (its state's
``last_seq`` is the table's newest ``seq``). When it is not, what matters is how long the
oldest unapplied change has waited since it was committed to the change log: that is what a
freshness budget bounds. An idle table is fresh however old its mirror, so this is not the age
of the last apply.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import pyarrow as pa
from deltalake import DeltaTable, QueryBuilder

from cdc_platform.errors import SparkError
from cdc_platform.spark.locations import state_uri
from cdc_platform.spark.mirror_state import STATE_FORMAT_VERSION

__all__ = ["MirrorFreshness", "mirror_freshness"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class MirrorFreshness:
    """One mirror against its change log."""

    db: str
    table: str
    mirror_seq: int
    """Newest change-log seq the mirror reflects (0: never applied)."""
    pending: int
    """Change-log rows of the table not in the mirror yet."""
    oldest_pending_at: datetime | None
    """Commit time (to the change log) of the oldest of them."""

    def behind_seconds(self, now: datetime | None = None) -> float:
        """How long the oldest unapplied change has waited (0 when the mirror is current)."""
        if self.oldest_pending_at is None:
            return 0.0
        at = self.oldest_pending_at
        if at.tzinfo is None:
            at = at.replace(tzinfo=UTC)
        return max(0.0, ((now or datetime.now(UTC)) - at).total_seconds())


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _mirror_seq(uri: str, options: dict[str, str] | None) -> int:
    try:
        state = DeltaTable(uri, storage_options=options)
    except Exception as exc:  # no state table: the mirror was never applied
        log.debug("no mirror state at %s: %s", uri, exc)
        return 0
    found = pa.table(
        QueryBuilder()
        .register("state", state)
        .execute(
            "SELECT MAX(last_seq) AS seq FROM state "  # noqa: S608 - an int constant
            f"WHERE format_version = {int(STATE_FORMAT_VERSION)}"
        )
    )
    value = found.column("seq").to_pylist()[0] if found.num_rows else None
    return int(value) if value is not None else 0


def mirror_freshness(
    change_log_uri: str,
    mirror_root: str,
    tables: Sequence[tuple[str, str]],
    storage_options: Mapping[str, str] | None = None,
) -> list[MirrorFreshness]:
    """For each (db, table), how far its mirror under ``mirror_root`` is behind.

    Raises:
        SparkError: the change log or a state table could not be read.
    """
    options = dict(storage_options or {}) or None
    try:
        changes = DeltaTable(change_log_uri, storage_options=options)
    except Exception as exc:  # no change log yet: nothing is pending
        log.debug("no change log at %s: %s", change_log_uri, exc)
        return [MirrorFreshness(db, table, 0, 0, None) for db, table in tables]
    query = QueryBuilder().register("changes", changes)
    out = []
    try:
        for db, table in tables:
            applied = _mirror_seq(state_uri(mirror_root, db, table), options)
            found = pa.table(
                query.execute(
                    "SELECT COUNT(*) AS pending, MIN(committed_at) AS oldest FROM changes "  # noqa: S608 - literals quoted
                    f'WHERE db = {_literal(db)} AND "table" = {_literal(table)} '
                    f"AND seq > {int(applied)}"
                )
            )
            pending = int(found.column("pending").to_pylist()[0] or 0)
            oldest = found.column("oldest").to_pylist()[0] if pending else None
            out.append(MirrorFreshness(db, table, applied, pending, oldest))
    except Exception as exc:  # delta-rs / DataFusion errors, translated here
        raise SparkError(
            f"reading the freshness of the mirrors of {change_log_uri}: {exc}"
        ) from exc
    return out
