"""Each transaction names the server it was read from, so a checkpoint after it does too.

The source hands its server identity with every transaction it yields (``Transaction.server``,
carried into ``ChangeEvent.resume_after``) instead of beside the stream: a consumer needs
nothing but the events to know which server a file/position checkpoint points into. The
assembler is fed the library's own event classes, as in test_source_heartbeat.py.
"""

from __future__ import annotations

from typing import Any

import pytest
from pymysqlreplication.event import HeartbeatLogEvent, MariadbGtidEvent, QueryEvent, XidEvent

from cdc_platform.events import ResumePosition, ServerIdentity
from cdc_platform.source.filters import TableFilter
from cdc_platform.source.stream.boundaries import AssemblySettings
from cdc_platform.source.stream.table_maps import Catalog, TablePlans
from cdc_platform.source.stream.transactions import TransactionAssembler
from cdc_platform.testing.events import library_event

pytestmark = pytest.mark.unit

FILE = "mysql-bin.000001"
PRIMARY = ServerIdentity(1, gtid_domain_id=0)
PROMOTED = ServerIdentity(2, gtid_domain_id=0)


def _assembler() -> TransactionAssembler:
    tables = TableFilter([r"shop\..*"], [])
    plans = TablePlans(tables, lambda db, table: Catalog(), is_mariadb=True)
    clock = [100.0]

    def tick() -> float:
        clock[0] += 10  # past the one-quiet-COMMIT-a-second limit: every COMMIT comes out
        return clock[0]

    start = ResumePosition(FILE, 400, "0-1-5")
    return TransactionAssembler(start, plans, AssemblySettings(tables, tick, heartbeats=True))


def _transaction(assembler: TransactionAssembler, pos: int, gtid: str) -> Any:
    group = [
        library_event(MariadbGtidEvent, pos + 80, 80, gtid=gtid, flags=0),
        library_event(QueryEvent, pos + 160, 80, schema=b"other", query="BEGIN"),
        library_event(XidEvent, pos + 200, 40),
    ]
    (commit,) = [out for event in group for out in assembler.feed(event)]
    return commit


def test_every_transaction_and_its_checkpoint_name_the_server_of_its_connection() -> None:
    assembler = _assembler()
    assembler.server = PRIMARY
    first = _transaction(assembler, 400, "0-1-6")
    assert first.txn.server == PRIMARY
    assert first.resume_after().server == PRIMARY
    (idle,) = assembler.feed(library_event(HeartbeatLogEvent, 600, 19, timestamp=0, ident=FILE))
    assert idle.txn.idle
    assert idle.resume_after().server == PRIMARY

    # The source reconnected to another server (a promoted replica, GTID resume).
    assembler.server = PROMOTED
    second = _transaction(assembler, 600, "0-2-7")
    assert second.txn.server == PROMOTED
    assert second.resume_after() == ResumePosition(FILE, 800, "0-2-7")
    assert second.resume_after().server == PROMOTED
    assert first.resume_after().server == PRIMARY  # what was read before keeps its server


def test_a_source_without_server_identity_names_none() -> None:
    assembler = _assembler()
    commit = _transaction(assembler, 400, "0-1-6")
    assert commit.txn.server is None
    assert commit.resume_after().server is None
