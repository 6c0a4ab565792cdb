"""The source side of a comparison: a table read into Parquet staging files in the lake.

A table with a primary key is read in key chunks (keyset, autocommit, no locks; the same
reader and value encoder as the snapshot); one without is streamed as one chunk. Each staged
row holds its chunk number, raw key, ``pk`` JSON and row image JSON; Spark reads them back
and types them with the mirror's rules (:mod:`.compare`).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pymysql

from cdc_platform.backfill.chunk_bytes import rows_within
from cdc_platform.errors import SinkError
from cdc_platform.reconcile.comparison import ChunkProgress
from cdc_platform.sink.lake_files import LakeFile
from cdc_platform.source.mysql import source_errors
from cdc_platform.source.reading.row_keys import encode_key
from cdc_platform.source.reading.row_reader import read_chunk
from cdc_platform.source.reading.table_description import SnapshotTable
from cdc_platform.source.sql import qualified_name
from cdc_platform.source.values import dumps

__all__ = ["CHUNK_COLUMN", "remove_staging", "stage_source", "stage_whole_table"]

log = logging.getLogger(__name__)

CHUNK_COLUMN = "_cdc_chunk"
"""Column of the staged source files (beside ``key``, ``pk``, ``after``: no source column
sits beside them there; typed frames rename them to the table's engine columns)."""
_ROWS_PER_FILE = 200_000


def stage_source(  # noqa: PLR0913 (what to read where; keyword-only: how much, observer)
    conn: pymysql.connections.Connection[Any],
    spec: SnapshotTable,
    staging: LakeFile,
    *,
    chunk_size: int,
    chunk_bytes: int,
    on_chunk: Callable[[ChunkProgress], None] | None,
) -> tuple[int, int]:
    """Read the source table in key chunks (at most ``chunk_size`` rows and ``chunk_bytes``
    column bytes each) into Parquet files of at most about that many bytes; returns (rows,
    chunks)."""
    started = time.perf_counter()
    columns: dict[str, list[Any]] = {CHUNK_COLUMN: [], "key": [], "pk": [], "after": []}
    rows = chunks = files = held = 0

    def flush() -> None:
        nonlocal files, held
        held = 0
        if not columns["pk"]:
            return
        table = pa.table(
            {
                CHUNK_COLUMN: pa.array(columns[CHUNK_COLUMN], pa.int64()),
                "key": pa.array(columns["key"], pa.string()),
                "pk": pa.array(columns["pk"], pa.string()),
                "after": pa.array(columns["after"], pa.string()),
            }
        )
        staging.child(f"part-{files:05d}.parquet").write_parquet(table)
        files += 1
        for values in columns.values():
            values.clear()

    after: list[Any] | None = None
    while True:
        asked = rows_within(conn, spec, after, chunk_size, chunk_bytes)
        chunk = read_chunk(conn, spec, after, asked)
        for pk, image, key in zip(chunk.pks, chunk.images, chunk.keys, strict=True):
            held += len(pk) + len(image)
            columns[CHUNK_COLUMN].append(chunks)
            columns["key"].append(json.dumps(encode_key(key)))
            columns["pk"].append(pk)
            columns["after"].append(image)
        rows += len(chunk)
        if chunk:
            chunks += 1
        if len(columns["pk"]) >= _ROWS_PER_FILE or held >= chunk_bytes:
            flush()
        if on_chunk is not None and chunk:
            on_chunk(ChunkProgress(spec.name, chunks, rows, time.perf_counter() - started))
        if len(chunk) < asked:
            break
        after = chunk.last_key
    flush()
    return rows, chunks


def stage_whole_table(
    conn: pymysql.connections.Connection[Any],
    spec: SnapshotTable,
    staging: LakeFile,
    batch: int,
    on_chunk: Callable[[ChunkProgress], None] | None,
) -> int:
    """Stream a table without a primary key (no key to chunk by) into Parquet files, as one
    chunk: an unbuffered SELECT, so the rows never gather in memory. Returns the rows."""
    started = time.perf_counter()
    select = ", ".join(c.select for c in spec.columns)
    sql = f"SELECT {select} FROM {qualified_name(spec.db, spec.table)}"  # noqa: S608 (identifiers quoted by the source's quoting, values bound as parameters)
    rows = files = 0
    with (
        source_errors(conn, f"reading {spec.name} from"),
        conn.cursor(pymysql.cursors.SSCursor) as cur,
    ):
        cur.execute(sql)
        while records := cur.fetchmany(batch):
            images = [
                dumps(
                    {
                        c.name: None if v is None else c.convert(v)
                        for c, v in zip(spec.columns, record, strict=True)
                    }
                )
                for record in records
            ]
            part = pa.table(
                {
                    CHUNK_COLUMN: pa.array([0] * len(images), pa.int64()),
                    "key": pa.array(["[]"] * len(images), pa.string()),
                    "pk": pa.array(images, pa.string()),
                    "after": pa.array(images, pa.string()),
                }
            )
            staging.child(f"part-{files:05d}.parquet").write_parquet(part)
            files += 1
            rows += len(images)
            if on_chunk is not None:
                on_chunk(ChunkProgress(spec.name, 1, rows, time.perf_counter() - started))
    return rows


def remove_staging(staging: LakeFile) -> None:
    """Delete a comparison's staging files (a failure is only logged)."""
    try:
        staging.delete_tree()
    except SinkError as exc:  # a leftover staging folder harms nothing
        log.warning("staging %s not removed: %s", staging, exc)
