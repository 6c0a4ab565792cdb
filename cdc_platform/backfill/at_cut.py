"""Events the snapshot writes at its cut, as if the server had logged them there.

A snapshot's own rows and DDL (the rows it reads, a whole copy's ``TRUNCATE``, an empty
table's ``CREATE TABLE``) belong at the cut: one transaction starting at the cut's binlog
position, with the cut's GTID set before it, server id 0 and no GTID of their own (no server
wrote them). One home for that transaction and for a DDL row placed in it.
"""

from __future__ import annotations

import time

from cdc_platform.events import ChangeEvent, EventKind, Op, ResumePosition, Transaction
from cdc_platform.source.reading.table_description import SnapshotTable

__all__ = ["cut_transaction", "ddl_at_cut"]


def cut_transaction(cut: ResumePosition) -> Transaction:
    """The transaction of events the snapshot places at ``cut`` (stamped now)."""
    return Transaction(
        start=cut.binlog_position,
        gtid=None,
        gtid_set_before=cut.gtid_set,
        server_id=0,
        timestamp=int(time.time()),
    )


def ddl_at_cut(spec: SnapshotTable, cut: ResumePosition, statement: str) -> ChangeEvent:
    """``statement`` as a DDL event on ``spec``'s table at ``cut``, with its ``columns``."""
    return ChangeEvent(
        EventKind.DDL,
        cut_transaction(cut),
        cut.binlog_position,
        0,
        db=spec.db,
        table=spec.table,
        op=Op.DDL,
        ddl=statement,
        columns=spec.columns_json,
    )
