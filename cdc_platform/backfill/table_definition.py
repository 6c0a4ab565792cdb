"""An empty table's definition in the change log, so that its mirror exists (empty).

A mirror takes its columns from the change log: the ``columns`` of the table's rows, or a
``CREATE TABLE`` captured while streaming. A table that already existed when the destination
started and had no rows leaves neither: its snapshot copies nothing, and no mirror would exist
until its first change (a reader would find no table at all). So the snapshot records such a
table's definition at its cut: the server's ``SHOW CREATE TABLE`` text as a DDL row carrying
the table's ``columns``, as if the table had been created there. ``CREATE TABLE`` removes no
rows (nothing is reset by it: a row the segment committed before it stays), and it queues no
re-read.
"""

from __future__ import annotations

from typing import Any

import pymysql

from cdc_platform.backfill.at_cut import ddl_at_cut
from cdc_platform.events import ChangeEvent, ResumePosition
from cdc_platform.source.reading.table_description import SnapshotTable
from cdc_platform.source.sql import qualified_name

__all__ = ["definition_event"]


def definition_event(
    conn: pymysql.connections.Connection[Any], spec: SnapshotTable, cut: ResumePosition
) -> ChangeEvent:
    """The table's ``CREATE TABLE`` as a DDL event at ``cut`` (server id 0, no GTID, like the
    snapshot's rows), with its ``columns``."""
    with conn.cursor() as cur:
        cur.execute(f"SHOW CREATE TABLE {qualified_name(spec.db, spec.table)}")
        row = cur.fetchone()
    statement = (
        str(row[1]) if row is not None else f"CREATE TABLE {qualified_name(spec.db, spec.table)}"
    )
    return ddl_at_cut(spec, cut, statement)
