"""Compaction of the change log as a fenced commit: rewrite small files, or lose the race cleanly.

delta-rs's own ``optimize.compact`` is not safe on the change log: two compactions of the same
files both commit (removing a ``dataChange=false`` file twice is not a conflict, and
``max_commit_retries=0`` does not stop its rebase), so a holder paused inside its compaction
while its successor compacted the same files would keep every rewritten row twice.

This compaction is an ordinary write instead: for each ``(db, table)`` partition with several
small files, the rows with ``seq`` in the range those files cover are read from one snapshot
and written back with ``mode="overwrite"`` and a predicate naming exactly that range, in one
commit made with ``max_commit_retries=0``. The commit is therefore made against the snapshot
the rows were read from or not at all: if anyone committed in between (a successor's batch, a
successor's compaction, an operator), delta-rs raises ``CommitFailedError`` and nothing
changes. The rows are read and deleted through the same predicate on the same snapshot, so the
rewrite holds each row once whatever files the range touches.

Readers are unaffected: the rewritten rows are byte-for-byte the same values with the same
``seq``, and every reader of the change log selects rows by ``seq``, not by Delta version.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable, QueryBuilder, write_deltalake
from deltalake.exceptions import CommitFailedError
from deltalake.transaction import CommitProperties

__all__ = [
    "CompactionPlan",
    "PartitionRange",
    "commit_compaction",
    "plan_compaction",
    "read_compaction_rows",
]

MIN_FILES = 2
"""A partition needs at least this many small files for a rewrite to pay."""


@dataclass(frozen=True, slots=True)
class PartitionRange:
    """The seq range of one partition's small files (both ends included)."""

    db: str | None
    table: str | None
    first_seq: int
    last_seq: int
    files: int

    def predicate(self) -> str:
        """SQL for the rows of this range (DataFusion dialect, as delta-rs parses it)."""
        return (
            f"({_equals('db', self.db)} AND {_equals('table', self.table)}"
            f" AND seq >= {int(self.first_seq)} AND seq <= {int(self.last_seq)})"
        )


@dataclass(frozen=True, slots=True)
class CompactionPlan:
    """What one compaction rewrites, planned from one snapshot of the change log."""

    version: int
    ranges: tuple[PartitionRange, ...]

    @property
    def files(self) -> int:
        """Small files the plan merges (the rewrite may touch a few big ones in the ranges)."""
        return sum(r.files for r in self.ranges)

    def predicate(self) -> str:
        return " OR ".join(r.predicate() for r in self.ranges)


def plan_compaction(
    table: DeltaTable, target_size: int | None, max_bytes: int | None = None
) -> CompactionPlan | None:
    """Ranges of the partitions with at least two files below ``target_size``; None if none.

    ``target_size`` None uses the table's ``delta.targetFileSize`` (100 MB by default);
    ``max_bytes`` caps the small files one compaction merges (see :func:`plan_ranges`).
    """
    actions = pa.table(table.get_add_actions(flatten=True))
    size = target_size or _table_target_size(table)
    ranges = plan_ranges(actions.to_pylist(), size, max_bytes)
    if not ranges:
        return None
    return CompactionPlan(version=table.version(), ranges=tuple(ranges))


def plan_ranges(
    actions: Iterable[Mapping[str, Any]], target_size: int, max_bytes: int | None = None
) -> list[PartitionRange]:
    """Per partition, the seq range covering its small files (pure: one add action per row).

    A file without seq statistics cannot be placed in a range, so its partition is left alone.
    With ``max_bytes``, one compaction takes the oldest small files up to that many bytes in
    all (at least two, so it always progresses); the rest wait for the next one. That bounds
    the time a compaction adds to its commit (the stream waits for it), e.g. after a snapshot's
    large chunk commits.
    """
    small: dict[tuple[str | None, str | None], list[tuple[int, int, int]]] = defaultdict(list)
    unplaceable: set[tuple[str | None, str | None]] = set()
    for action in actions:
        key = (action.get("partition.db"), action.get("partition.table"))
        low, high = action.get("min.seq"), action.get("max.seq")
        if low is None or high is None:
            unplaceable.add(key)
            continue
        if int(action["size_bytes"]) < target_size:
            small[key].append((int(low), int(high), int(action["size_bytes"])))
    candidates = sorted(
        (
            (key, sorted(spans))
            for key, spans in small.items()
            if len(spans) >= MIN_FILES and key not in unplaceable
        ),
        key=lambda candidate: candidate[1][0][0],
    )
    budget = max_bytes
    ranges = []
    for (db, name), spans in candidates:
        taken = spans
        if budget is not None:
            taken = _within(spans, budget)
            if len(taken) < MIN_FILES:
                break
            budget -= sum(size for _, _, size in taken)
        first = min(low for low, _, _ in taken)
        last = max(high for _, high, _ in taken)
        ranges.append(PartitionRange(db, name, first, last, len(taken)))
    return ranges


def _within(spans: list[tuple[int, int, int]], budget: int) -> list[tuple[int, int, int]]:
    """The first files of ``spans`` (in seq order) whose sizes fit ``budget``; the first two
    always, when the budget still has room."""
    taken: list[tuple[int, int, int]] = []
    used = 0
    for span in spans:
        if len(taken) >= MIN_FILES and used + span[2] > budget:
            break
        if len(taken) < MIN_FILES and used >= budget:
            break
        taken.append(span)
        used += span[2]
    return taken


def read_compaction_rows(table: DeltaTable, plan: CompactionPlan) -> pa.Table:
    """Every row of the plan's ranges in the table's snapshot, in seq order, in its schema."""
    if table.version() != plan.version:
        raise ValueError(
            f"compaction planned on version {plan.version}, table is at {table.version()}"
        )
    schema = table.schema().to_arrow()
    schema = pa.schema(schema)  # arro3 -> pyarrow
    query = QueryBuilder().register("changes", table)
    sql = f"SELECT * FROM changes WHERE {plan.predicate()} ORDER BY seq"  # noqa: S608
    rows = pa.table(query.execute(sql))
    return rows.select(schema.names).cast(schema)


def commit_compaction(
    table: DeltaTable,
    plan: CompactionPlan,
    rows: pa.Table,
    *,
    target_size: int | None,
    metadata: Mapping[str, str | int],
) -> bool:
    """Replace the plan's ranges with ``rows`` in one commit on ``plan.version``.

    Returns False, changing nothing, when someone committed since that version (the caller
    reloads the table: delta-rs may have refreshed the object while failing).
    """
    if table.version() != plan.version:
        return False
    properties = CommitProperties(
        custom_metadata={
            **{key: str(value) for key, value in metadata.items()},
            "cdc.compaction.files": str(plan.files),
            "cdc.compaction.rows": str(rows.num_rows),
        },
        max_commit_retries=0,
    )
    try:
        write_deltalake(
            table,
            rows,
            mode="overwrite",
            predicate=plan.predicate(),
            target_file_size=target_size,
            commit_properties=properties,
        )
    except CommitFailedError:
        return False
    return True


def _equals(column: str, value: str | None) -> str:
    name = f'"{column}"'
    if value is None:
        return f"{name} IS NULL"
    return f"{name} = '{value.replace(chr(39), chr(39) * 2)}'"


def _table_target_size(table: DeltaTable) -> int:
    configured = table.metadata().configuration.get("delta.targetFileSize")
    return int(configured) if configured else 100 * 1024 * 1024
