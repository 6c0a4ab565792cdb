"""Compaction of the change log as a fenced commit: merge small files, or lose the race cleanly.

delta-rs's own ``optimize.compact`` is not safe on the change log: two compactions of the same
files both commit (removing a ``dataChange=false`` file twice is not a conflict, and
``max_commit_retries=0`` does not stop its rebase), so a holder paused inside its compaction
while its successor compacted the same files would keep every rewritten row twice.

This compaction merges whole files and commits the swap itself. For each ``(db, table)``
partition with several small files (chosen from one snapshot's add actions,
:mod:`cdc_platform.sink.compaction_plan`), it reads those files' Parquet, row group by row
group, and writes their rows as they are into one new Parquet file beside them under a fresh
name. Then one commit (``create_write_transaction``, ``max_commit_retries=0``) on the snapshot
the plan was made from removes the small files and adds the new ones, all ``dataChange=false``.
The commit is therefore made against that snapshot or not at all: if anyone committed in
between (a successor's batch, a successor's compaction, an operator), delta-rs raises
``CommitFailedError`` and nothing changes. Every row of a removed file is in its new file and
no other row is (the counts are checked against the add actions), so each row is held once.

No query engine is involved: reading the rows through delta-rs's ``QueryBuilder`` and writing
them back with a predicate overwrite paged in DataFusion, 45-57 MB on top of a catch-up run's
steady state (docs/operations.md, "The 250 MB target"). pyarrow's Parquet reader and writer
do this work (:mod:`cdc_platform.sink.parquet_io`, without ``pyarrow.parquet``'s imports).

Memory stays bounded: the files are read a batch of :data:`PIECE_ROWS` rows at a time and
written a row group at a time (at most :data:`ROW_GROUP_ROWS` rows or
:data:`ROW_GROUP_BYTES` of Arrow), the ``columns`` column dictionary-encoded as in the files
(one value per table, about 1 KB, that a plain read would decode on every row). The new file
is written to a temporary file on local disk, then uploaded through the lake's object-store
client (:class:`~cdc_platform.sink.lake_files.LakeFile`: one PUT on S3, a rename into place on
local disk), so no half-written file ever sits in the table.

After a lost race the new files are referenced by no commit: the compaction deletes them once
the commit file of the version it tried to write names none of them (a commit whose answer was
lost may have landed, and then its files must stay). When that cannot be told, or after a
crash, they stay as orphans that the sink's full vacuum removes (``vacuum_full``).

Readers are unaffected: the rewritten rows are byte-for-byte the same values with the same
``seq``, and every reader of the change log selects rows by ``seq``, not by Delta version.
"""

from __future__ import annotations

import contextlib
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import BinaryIO
from urllib.parse import unquote
from uuid import uuid4

import pyarrow as pa
from deltalake import DeltaTable
from deltalake.exceptions import CommitFailedError
from deltalake.transaction import AddAction, CommitProperties, RemoveAction

from cdc_platform.errors import SinkError
from cdc_platform.sink.compaction_plan import CompactionPlan, FileGroup
from cdc_platform.sink.lake_files import LakeFile
from cdc_platform.sink.object_store import STORE_ERRORS
from cdc_platform.sink.parquet_io import ParquetBatches, ParquetSink
from cdc_platform.sink.schema import PARTITION_COLUMNS

__all__ = [
    "PIECE_ROWS",
    "ROW_GROUP_BYTES",
    "ROW_GROUP_ROWS",
    "CompactedFile",
    "commit_compaction",
    "compact",
    "discard",
    "file_schema",
    "write_compacted",
    "write_compaction",
    "write_plan",
]

DICTIONARY_COLUMNS = ("columns",)
"""Columns read and written dictionary-encoded: one value repeated on every row of a table
(its column list, about 1 KB), which Parquet stores once per page but a plain read decodes
per row (most of the memory of a read otherwise)."""

PIECE_ROWS = 8192
"""Rows read from a file at once."""
ROW_GROUP_ROWS = 16_384
"""Rows of one row group of a merged file at most (a row group is held until written)."""
ROW_GROUP_BYTES = 4 * 1024 * 1024
"""Arrow bytes of one row group of a merged file at most."""


@dataclass(frozen=True, slots=True)
class CompactedFile:
    """A merged file written into the table, not yet committed."""

    group: FileGroup
    path: str
    """Relative to the table, as its add action names it."""
    size: int
    rows: int
    target: LakeFile

    # delta-rs takes object keys (the log's paths decoded once) and encodes them itself; given
    # the log's form, a remove would name no active file and still be accepted (rows twice).

    def add_action(self, now_ms: int) -> AddAction:
        return AddAction(
            path=unquote(self.path),
            size=self.size,
            partition_values=self.group.partition_values,
            modification_time=now_ms,
            data_change=False,
            stats=self.group.stats(),
        )

    def remove_actions(self, now_ms: int) -> list[RemoveAction]:
        return [
            RemoveAction(
                path=unquote(small.path),
                data_change=False,
                deletion_timestamp=now_ms,
                size=small.size,
                partition_values=self.group.partition_values,
            )
            for small in self.group.files
        ]


def compact(
    table: DeltaTable,
    plan: CompactionPlan,
    *,
    storage_options: Mapping[str, str] | None,
    metadata: Mapping[str, str | int],
    piece_rows: int = PIECE_ROWS,
) -> bool:
    """Merge the plan's groups (:func:`write_compaction`) and commit them in one commit on
    ``plan.version`` (:func:`commit_compaction`).

    Returns False, changing nothing, when someone committed since that version (the caller
    reloads the table: delta-rs may have refreshed the object while failing).
    """
    if table.version() != plan.version:
        return False
    written = write_compaction(table, plan, storage_options=storage_options, piece_rows=piece_rows)
    return commit_compaction(
        table, plan, written, storage_options=storage_options, metadata=metadata
    )


def write_compaction(
    table: DeltaTable,
    plan: CompactionPlan,
    *,
    storage_options: Mapping[str, str] | None,
    piece_rows: int = PIECE_ROWS,
) -> list[CompactedFile]:
    """The merged file of each group of the plan, written into the table, not committed.

    Raises:
        SinkError: storage trouble, or files that do not hold what their add actions say
            (the files written so far are deleted).
    """
    root = LakeFile(table.table_uri, storage_options)
    return write_plan(root, plan, file_schema(table), piece_rows)


def write_plan(
    root: LakeFile, plan: CompactionPlan, schema: pa.Schema, piece_rows: int = PIECE_ROWS
) -> list[CompactedFile]:
    """:func:`write_compaction` without the table object (a thread beside the writer, which
    keeps using that object, passes the table's root and :func:`file_schema` instead)."""
    written: list[CompactedFile] = []
    try:
        for group in plan.groups:
            written.append(write_compacted(root, group, schema, piece_rows))
    except BaseException:
        discard(written)
        raise
    return written


def commit_compaction(  # noqa: PLR0913 (the swap; where it commits keyword-only)
    table: DeltaTable,
    plan: CompactionPlan,
    written: list[CompactedFile],
    *,
    storage_options: Mapping[str, str] | None,
    metadata: Mapping[str, str | int],
    base_version: int | None = None,
) -> bool:
    """Swap the plan's small files for ``written`` in one commit on ``base_version``
    (default ``plan.version``); False, changing nothing, when the table is not at that
    version or someone committed since (the new files are then deleted, see the module
    docstring).

    A later ``base_version`` than the plan's is only safe when every commit in between added
    files and removed none (the writer's own appends): the caller checks that.
    """
    base = plan.version if base_version is None else base_version
    if table.version() != base:
        discard(written)
        return False
    now_ms = int(time.time() * 1000)
    actions: list[AddAction | RemoveAction] = []
    for item in written:
        actions.extend(item.remove_actions(now_ms))
        actions.append(item.add_action(now_ms))
    properties = CommitProperties(
        custom_metadata={
            **{key: str(value) for key, value in metadata.items()},
            "cdc.compaction.files": str(plan.files),
            "cdc.compaction.rows": str(sum(item.rows for item in written)),
        },
        max_commit_retries=0,
    )
    try:
        table.create_write_transaction(
            actions,
            mode="append",
            schema=table.schema(),
            partition_by=list(PARTITION_COLUMNS),
            commit_properties=properties,
        )
    except CommitFailedError:
        landed = _landed(LakeFile(table.table_uri, storage_options), base, written)
        if landed is False:
            discard(written)
        return landed is True
    # Unlike write_deltalake, the transaction leaves the object on the snapshot it read: a
    # vacuum on it next would take the new files for orphans (measured: deleted them).
    table.update_incremental()
    return True


def file_schema(table: DeltaTable) -> pa.Schema:
    """The Arrow schema of the table's data files: its columns but the partition columns, the
    :data:`DICTIONARY_COLUMNS` as dictionaries of strings."""
    schema = pa.schema(table.schema().to_arrow())  # arro3 -> pyarrow
    for name in PARTITION_COLUMNS:
        index = schema.get_field_index(name)
        if index >= 0:
            schema = schema.remove(index)
    for name in DICTIONARY_COLUMNS:
        index = schema.get_field_index(name)
        if index >= 0 and pa.types.is_string(schema.field(index).type):
            field = schema.field(index)
            schema = schema.set(index, field.with_type(pa.dictionary(pa.int32(), pa.string())))
    return schema


def write_compacted(
    root: LakeFile, group: FileGroup, schema: pa.Schema, piece_rows: int = PIECE_ROWS
) -> CompactedFile:
    """Write the rows of ``group``'s files, in their order, as one new file in the table at
    ``root`` (beside the first of them); not committed."""
    folder = group.files[0].path.rpartition("/")[0]
    name = f"part-00000-{uuid4()}-c000.snappy.parquet"
    path = f"{folder}/{name}" if folder else name
    target = root.child(unquote(path))
    with tempfile.TemporaryFile(prefix="cdc-compaction-") as spool:
        try:
            rows = _write_rows(root, group, schema, spool, piece_rows)
        except (pa.ArrowException, *STORE_ERRORS) as exc:
            raise SinkError(f"compaction of {root}: copying Parquet rows failed: {exc}") from None
        size = spool.tell()
        spool.seek(0)
        target.upload(spool)
    return CompactedFile(group=group, path=path, size=size, rows=rows, target=target)


def _write_rows(
    root: LakeFile, group: FileGroup, schema: pa.Schema, spool: BinaryIO, piece_rows: int
) -> int:
    """Copy the rows of the group's files into ``spool`` as one Parquet file; their count."""
    dictionaries = [name for name in DICTIONARY_COLUMNS if schema.get_field_index(name) >= 0]
    sink = ParquetSink(spool, schema)
    written = 0
    pending: list[pa.RecordBatch] = []
    with contextlib.closing(sink):
        for small in group.files:
            with contextlib.closing(root.child(unquote(small.path)).reader(small.size)) as source:
                parquet = ParquetBatches(source, dictionaries=dictionaries)
                if parquet.num_rows != small.rows:
                    raise SinkError(
                        f"{small.path} holds {parquet.num_rows} rows, its add action says "
                        f"{small.rows}: not compacted"
                    )
                for batch in parquet.batches(piece_rows):
                    pending.append(_conformed(batch, schema))
                    written += batch.num_rows
                    if _full(pending):
                        sink.write(pa.Table.from_batches(pending, schema))
                        pending = []
        if pending:
            sink.write(pa.Table.from_batches(pending, schema))
    if written != group.rows:
        raise SinkError(f"compaction read {written} rows, the add actions say {group.rows}")
    return written


def _conformed(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """``batch`` in ``schema`` (an older file may store a column differently)."""
    if batch.schema.equals(schema):
        return batch
    return batch.select(schema.names).cast(schema)


def _full(pending: list[pa.RecordBatch]) -> bool:
    rows = sum(int(b.num_rows) for b in pending)
    return rows >= ROW_GROUP_ROWS or sum(int(b.nbytes) for b in pending) >= ROW_GROUP_BYTES


def _landed(root: LakeFile, base: int, written: list[CompactedFile]) -> bool | None:
    """Whether the commit this compaction tried to write on version ``base`` is in the log
    after all (its answer lost); None when that cannot be told."""
    try:
        entry = root.child("_delta_log", f"{base + 1:020d}.json").read_text()
    except SinkError:
        return None
    if entry is None:
        return None
    return any(item.target.name in entry for item in written)


def discard(written: list[CompactedFile]) -> None:
    """Delete new files no commit refers to; what cannot be deleted is left to vacuum."""
    for item in written:
        with contextlib.suppress(SinkError):
            item.target.delete()
