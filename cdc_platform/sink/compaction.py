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

The rows are never all in memory at once: they stream into that one write in pieces of about
:data:`PIECE_ROWS` rows, each piece one query of a seq sub-range on the same snapshot (the
pieces of a range cover it exactly, with no gap or overlap). Read whole, 8 MiB of small files
were about 200,000 rows and 600 MB at the peak (every row carries its table's ``columns`` JSON,
which Parquet stores once per page but a read decodes per row).

Readers are unaffected: the rewritten rows are byte-for-byte the same values with the same
``seq``, and every reader of the change log selects rows by ``seq``, not by Delta version.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable, QueryBuilder, write_deltalake
from deltalake.exceptions import CommitFailedError
from deltalake.transaction import CommitProperties

__all__ = [
    "PIECE_ROWS",
    "CompactionPlan",
    "CompactionRows",
    "PartitionRange",
    "commit_compaction",
    "plan_compaction",
    "read_compaction_rows",
]

MIN_FILES = 2
"""A partition needs at least this many small files for a rewrite to pay."""

DICTIONARY_COLUMNS = ("columns",)
"""Columns read back dictionary-encoded: one value repeated on every row of a table (its
column list, about 1 KB), which Parquet stores once per page but a plain read decodes per row
(most of the memory of a read otherwise)."""

PIECE_ROWS = 8192
"""Rows one piece of a compaction reads at most, as far as the files' row counts tell."""


@dataclass(frozen=True, slots=True)
class PartitionRange:
    """The seq range of one partition's small files (both ends included)."""

    db: str | None
    table: str | None
    first_seq: int
    last_seq: int
    files: int
    cuts: tuple[int, ...] = ()
    """Where pieces after the first start, ascending, inside ``(first_seq, last_seq]``."""

    def predicate(self) -> str:
        """SQL for the rows of this range (DataFusion dialect, as delta-rs parses it)."""
        return self._between(self.first_seq, self.last_seq)

    def pieces(self) -> list[str]:
        """Predicates of the pieces: consecutive seq sub-ranges that cover the range exactly."""
        starts = [self.first_seq, *self.cuts]
        ends = [start - 1 for start in self.cuts] + [self.last_seq]
        return [self._between(low, high) for low, high in zip(starts, ends, strict=True)]

    def _between(self, low: int, high: int) -> str:
        return (
            f"({_equals('db', self.db)} AND {_equals('table', self.table)}"
            f" AND seq >= {int(low)} AND seq <= {int(high)})"
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
    table: DeltaTable,
    target_size: int | None,
    max_bytes: int | None = None,
    piece_rows: int = PIECE_ROWS,
) -> CompactionPlan | None:
    """Ranges of the partitions with at least two files below ``target_size``; None if none.

    ``target_size`` None uses the table's ``delta.targetFileSize`` (100 MB by default);
    ``max_bytes`` caps the small files one compaction merges and ``piece_rows`` the rows read
    at once (see :func:`plan_ranges`).
    """
    actions = pa.table(table.get_add_actions(flatten=True))
    size = target_size or _table_target_size(table)
    ranges = plan_ranges(actions.to_pylist(), size, max_bytes, piece_rows)
    if not ranges:
        return None
    return CompactionPlan(version=table.version(), ranges=tuple(ranges))


def plan_ranges(
    actions: Iterable[Mapping[str, Any]],
    target_size: int,
    max_bytes: int | None = None,
    piece_rows: int = PIECE_ROWS,
) -> list[PartitionRange]:
    """Per partition, the seq range covering its small files (pure: one add action per row).

    A file without seq statistics cannot be placed in a range, so its partition is left alone.
    With ``max_bytes``, one compaction takes the oldest small files up to that many bytes in
    all (at least two, so it always progresses); the rest wait for the next one. That bounds
    the time a compaction adds to its commit (the stream waits for it), e.g. after a snapshot's
    large chunk commits. Each range is cut into pieces of about ``piece_rows`` rows by the
    ``num_records`` of the files it overlaps (see :func:`_cuts`).
    """
    small: dict[tuple[str | None, str | None], list[tuple[int, int, int]]] = defaultdict(list)
    counts: dict[tuple[str | None, str | None], list[tuple[int, int, int]]] = defaultdict(list)
    unplaceable: set[tuple[str | None, str | None]] = set()
    for action in actions:
        key = (action.get("partition.db"), action.get("partition.table"))
        low, high = action.get("min.seq"), action.get("max.seq")
        if low is None or high is None:
            unplaceable.add(key)
            continue
        counts[key].append((int(low), int(high), int(action.get("num_records") or 0)))
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
        cuts = _cuts(counts[(db, name)], first, last, piece_rows)
        ranges.append(PartitionRange(db, name, first, last, len(taken), cuts))
    return ranges


def _cuts(
    files: list[tuple[int, int, int]], first: int, last: int, piece_rows: int
) -> tuple[int, ...]:
    """Starts of the pieces after the first in ``[first, last]``, from ``(low, high, rows)``
    of the partition's files: a piece ends before the file that would take it past
    ``piece_rows``; a file of more rows is split evenly by seq (its rows are assumed spread
    evenly over its seq span, which holds for one table's rows in a commit)."""
    cuts: list[int] = []
    rows = 0
    for low, high, count in sorted(f for f in files if f[1] >= first and f[0] <= last):
        start, end = max(low, first), min(high, last)
        share = count * (end - start + 1) // (high - low + 1)
        if rows and rows + share > piece_rows and start > first and (not cuts or start > cuts[-1]):
            cuts.append(start)
            rows = 0
        parts = -(-share // piece_rows)
        if parts > 1:
            step = -(-(end - start + 1) // parts)
            inner = [c for c in range(start + step, end + 1, step) if not cuts or c > cuts[-1]]
            if inner:
                cuts.extend(inner)
                share = share * (end - inner[-1] + 1) // (end - start + 1)  # the last part's
                rows = 0
        rows += share
    return tuple(cuts)


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


class CompactionRows:
    """The rows of a plan's ranges in one snapshot, read piece by piece as they are written.

    ``num_rows`` is counted when the object is made (one small query); :meth:`batches` reads
    the pieces in seq order and fails if they do not add up to that count, which aborts the
    write it feeds (nothing is committed).
    """

    def __init__(self, table: DeltaTable, plan: CompactionPlan) -> None:
        if table.version() != plan.version:
            raise ValueError(
                f"compaction planned on version {plan.version}, table is at {table.version()}"
            )
        self.schema = _with_dictionaries(pa.schema(table.schema().to_arrow()))  # arro3 -> pyarrow
        self._plan = plan
        self._query = QueryBuilder().register("changes", table)
        sql = f"SELECT count(*) AS n FROM changes WHERE {plan.predicate()}"  # noqa: S608 (SQL over the local change-log table, predicates built from typed values)
        counted = self._sql(sql)
        self.num_rows: int = counted.column("n")[0].as_py()

    def _sql(self, sql: str) -> pa.Table:
        return pa.table(self._query.execute(sql))

    def batches(self) -> Iterator[pa.RecordBatch]:
        """The rows, in seq order within each range, a piece at a time, in the table's schema
        but for the :data:`DICTIONARY_COLUMNS` (the same values, as dictionaries).

        The queries run in a thread of their own, a batch or two ahead: the write that consumes
        this stream pulls it from inside delta-rs's async runtime, where a delta-rs query
        cannot start (tokio refuses to block on a runtime from within one).
        """
        handoff: queue.Queue[pa.RecordBatch | BaseException | None] = queue.Queue(maxsize=2)
        stop = threading.Event()
        reader = threading.Thread(
            target=self._read_pieces, args=(handoff, stop), name="compaction-read", daemon=True
        )
        reader.start()
        seen = 0
        try:
            while (item := handoff.get()) is not None:
                if isinstance(item, BaseException):
                    raise item
                seen += item.num_rows
                yield item
        finally:
            stop.set()  # the reader ends on its own if the write gave up before the end
            with contextlib.suppress(queue.Empty):
                handoff.get_nowait()
        reader.join()
        if seen != self.num_rows:
            raise RuntimeError(f"compaction read {seen} rows in pieces, {self.num_rows} counted")

    def _read_pieces(
        self, handoff: queue.Queue[pa.RecordBatch | BaseException | None], stop: threading.Event
    ) -> None:
        names = ", ".join(_select(field) for field in self.schema)

        def put(item: pa.RecordBatch | BaseException | None) -> bool:
            while not stop.is_set():
                with contextlib.suppress(queue.Full):
                    handoff.put(item, timeout=0.1)
                    return True
            return False

        try:
            for part in self._plan.ranges:
                for where in part.pieces():
                    sql = f"SELECT {names} FROM changes WHERE {where} ORDER BY seq"  # noqa: S608 (SQL over the local change-log table, predicates built from typed values)
                    for batch in self._query.execute(sql):
                        if not put(pa.record_batch(batch).cast(self.schema)):
                            return
            put(None)
        except BaseException as exc:  # handed to the consumer, which raises it
            put(exc)

    def reader(self) -> pa.RecordBatchReader:
        """:meth:`batches` as one stream (what the write consumes)."""
        return pa.RecordBatchReader.from_batches(self.schema, self.batches())


def read_compaction_rows(table: DeltaTable, plan: CompactionPlan) -> CompactionRows:
    """Every row of the plan's ranges in the table's snapshot, to be read as it is written."""
    return CompactionRows(table, plan)


def commit_compaction(
    table: DeltaTable,
    plan: CompactionPlan,
    rows: CompactionRows,
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
            rows.reader(),
            mode="overwrite",
            predicate=plan.predicate(),
            target_file_size=target_size,
            commit_properties=properties,
        )
    except CommitFailedError:
        return False
    return True


def _with_dictionaries(schema: pa.Schema) -> pa.Schema:
    """``schema`` with the :data:`DICTIONARY_COLUMNS` it has as dictionaries of strings."""
    for name in DICTIONARY_COLUMNS:
        index = schema.get_field_index(name)
        if index >= 0 and pa.types.is_string(schema.field(index).type):
            field = schema.field(index)
            schema = schema.set(index, field.with_type(pa.dictionary(pa.int32(), pa.string())))
    return schema


def _select(field: pa.Field) -> str:
    """The SELECT item of one column: dictionary-encoded by the query where ``field`` is."""
    if pa.types.is_dictionary(field.type):
        return f'arrow_cast("{field.name}", \'Dictionary(Int32, Utf8)\') AS "{field.name}"'
    return f'"{field.name}"'


def _equals(column: str, value: str | None) -> str:
    name = f'"{column}"'
    if value is None:
        return f"{name} IS NULL"
    return f"{name} = '{value.replace(chr(39), chr(39) * 2)}'"


def _table_target_size(table: DeltaTable) -> int:
    configured = table.metadata().configuration.get("delta.targetFileSize")
    return int(configured) if configured else 100 * 1024 * 1024
