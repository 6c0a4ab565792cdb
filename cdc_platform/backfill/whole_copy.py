"""Tables without a primary key: copied whole, in one consistent read at a known binlog place.

The chunked snapshot pages a table by its key and drops from each chunk the keys its binlog
segment touched. A table without a primary key has no key to page by, and identical rows
cannot be told apart, so it is copied differently:

1. ``START TRANSACTION WITH CONSISTENT SNAPSHOT`` on a connection of its own, then MariaDB's
   ``binlog_snapshot_file`` / ``binlog_snapshot_position`` (``SHOW STATUS``): the binlog place
   the read view is consistent with (every transaction committed before it is visible, none
   after it). The table is described inside the transaction: a DDL after the read view began
   makes the SELECT fail (the server's "table definition has changed"), and the copy starts
   over; one before it is in the description and in the rows alike.
2. Every row of the read, from an unbuffered SELECT, goes to a local spill file
   (:mod:`cdc_platform.sink.spilled_rows`) as fast as the server sends it; then the read view
   ends. No change-log commit runs while the server's read is open, so a slow lake cannot
   outlast the server's ``net_write_timeout`` and end the read.
3. The binlog is read on to that place exactly (the segment, full parts committed as usual):
   not to where the stream went quiet (a reconnect, a second between two commits of
   uncaptured tables). Every change before the place is in the read and in the segment both:
   it must precede the rows, or it is applied again after them. The place is reached at a
   transaction ending at or after it, before one starting after it, or at a server heartbeat
   past it (the snapshot's stream asks for heartbeats).
4. One Delta commit: the segment's last part, a ``TRUNCATE TABLE`` row (marked as the copy's,
   in a comment), then every spilled row as op ``r``, all at the segment's end. The mirror of
   a keyless table counts rows, so the copy must replace what the change log said before
   (rows streamed earlier): the truncate restarts the table there, and exactly the rows of the
   consistent read follow it. Binlog events after the place come after them.

Readers see the table before the copy or after it, never a truncate without its rows; a copy
cut short (a crash, kill -9) leaves the change log as it was, the table stays on the
snapshot's list, and its next copy starts over. Memory holds one part of rows; the spill's
disk holds the compressed table. MySQL 8 would read the place from
``performance_schema.log_status`` instead; only MariaDB is supported here (a server without
those status variables is refused).
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import pymysql
import pymysql.cursors

from cdc_platform.backfill.at_cut import ddl_at_cut
from cdc_platform.errors import SnapshotError, SnapshotSpillError
from cdc_platform.events import (
    BinlogPosition,
    ChangeEvent,
    ResumePosition,
)
from cdc_platform.sink.spilled_rows import RowSpill, SnapshotRows
from cdc_platform.source.reading.table_description import SnapshotTable, describe_table
from cdc_platform.source.sql import qualified_name
from cdc_platform.source.values import dumps

__all__ = ["COPY_MARK", "TABLE_DEFINITION_CHANGED", "copy_whole_table"]

COPY_MARK = "/* cdc-platform: a consistent copy of the table follows */"
"""Comment in the truncate row that starts a whole-table copy."""
TABLE_DEFINITION_CHANGED = 1412
"""ER_TABLE_DEF_CHANGED: a DDL changed the table after the read view began."""
_ATTEMPTS = 3

Segment = Callable[[BinlogPosition], tuple[list[ChangeEvent], ResumePosition, bool]]
"""Reads (and commits full parts of) the binlog up to a place exactly: the last part, the cut
after it, and whether a DDL may have changed the table."""
Commit = Callable[[Sequence[ChangeEvent], ResumePosition, SnapshotRows | None], None]
"""Commits events, then rows at the cut, as one change-log commit."""


def copy_whole_table(
    connect: Callable[[], AbstractContextManager[pymysql.connections.Connection[Any]]],
    spec: SnapshotTable,
    *,
    read_segment: Segment,
    commit: Commit,
    batch_rows: int,
) -> int:
    """Copy ``spec``'s table whole (see the module doc); returns the rows copied.

    Raises:
        SnapshotError: the server gives no consistent binlog place, or DDL kept changing the
            table while it was copied.
        pymysql.MySQLError: the source failed (the caller translates; a missing table is the
            caller's to end).
        SnapshotSpillError: the rows could not be written to the local spill file.
    """
    for attempt in range(_ATTEMPTS):
        try:
            with _spill(spec) as spill:
                with connect() as conn:
                    place, spec = _read(conn, spec, spill, batch_rows)
                events, cut, _changed = read_segment(place)
                rows = spill.rows(
                    spec.db, spec.table, spec.columns_json, cut.binlog_position, int(time.time())
                )
                commit([*events, _truncate(spec, cut)], cut, rows)
                return len(rows)
        except pymysql.MySQLError as exc:
            if exc.args[:1] != (TABLE_DEFINITION_CHANGED,) or attempt == _ATTEMPTS - 1:
                raise
    raise SnapshotError(f"{spec.name}: DDL kept changing the table during its copy")


def _read(
    conn: pymysql.connections.Connection[Any],
    spec: SnapshotTable,
    spill: RowSpill,
    batch_rows: int,
) -> tuple[BinlogPosition, SnapshotTable]:
    """The consistent read into ``spill``: its binlog place and the table as it described."""
    with conn.cursor() as cur:
        cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
        place = _snapshot_place(cur, spec)
    try:
        spec = describe_table(conn, spec.db, spec.table, require_key=False)
        for images in _rows(conn, spec, batch_rows):
            try:
                spill.write(images)  # a keyless table's `pk` is its whole image
            except OSError as exc:
                raise _spill_error(spec, spill.directory, exc) from exc
        return place, spec
    finally:
        conn.rollback()


@contextmanager
def _spill(spec: SnapshotTable) -> Iterator[RowSpill]:
    """A spill for ``spec``'s rows, removed afterwards."""
    try:
        spill = RowSpill()
    except OSError as exc:
        raise _spill_error(spec, Path(tempfile.gettempdir()), exc) from exc
    try:
        yield spill
    finally:
        spill.remove()


def _spill_error(spec: SnapshotTable, directory: Path, exc: OSError) -> SnapshotSpillError:
    return SnapshotSpillError(
        f"{spec.name}: its rows cannot be written to the copy's spill file in {directory} "
        f"({exc}); free room there or point TMPDIR at a larger directory, then rerun"
    )


def _snapshot_place(cur: Any, spec: SnapshotTable) -> BinlogPosition:
    cur.execute("SHOW STATUS LIKE 'binlog_snapshot_%'")
    status = {str(name).lower(): value for name, value in cur.fetchall()}
    file, pos = status.get("binlog_snapshot_file"), status.get("binlog_snapshot_position")
    if not file or pos is None:
        raise SnapshotError(
            f"{spec.name} has no primary key, and the server gives no binlog place for a "
            "consistent read (binlog_snapshot_file/position: MariaDB with log_bin): add a "
            "primary key to copy it"
        )
    return BinlogPosition(str(file), int(pos))


def _truncate(spec: SnapshotTable, cut: ResumePosition) -> ChangeEvent:
    return ddl_at_cut(
        spec, cut, f"TRUNCATE TABLE {qualified_name(spec.db, spec.table)} {COPY_MARK}"
    )


def _rows(
    conn: pymysql.connections.Connection[Any], spec: SnapshotTable, batch_rows: int
) -> Iterator[list[str]]:
    """The table's row images, ``batch_rows`` at a time, from one unbuffered SELECT."""
    select = ", ".join(c.select for c in spec.columns)
    sql = f"SELECT {select} FROM {qualified_name(spec.db, spec.table)}"  # noqa: S608 (identifiers quoted by the source's quoting, values bound as parameters)
    with conn.cursor(pymysql.cursors.SSCursor) as cur:
        cur.execute(sql)  # no parameters: pymysql leaves a `%` in a name alone
        while records := cur.fetchmany(batch_rows):
            yield [
                dumps(
                    {
                        c.name: None if v is None else c.convert(v)
                        for c, v in zip(spec.columns, record, strict=True)
                    }
                )
                for record in records
            ]
