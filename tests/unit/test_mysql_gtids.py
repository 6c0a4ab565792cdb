"""MySQL GTIDs are kept in transactions and resume positions (they used to be dropped).

No MySQL server can be installed here, so the assembler is fed the library's own event
classes with their fields set the way the library's parser sets them.
"""

from __future__ import annotations

import binascii
from typing import Any

import pytest
from pymysqlreplication.event import GtidEvent, QueryEvent, XidEvent

from cdc_platform.events import EventKind, ResumePosition, merge_gtid
from cdc_platform.source.filters import TableFilter
from cdc_platform.source.stream.boundaries import AssemblySettings
from cdc_platform.source.stream.table_maps import Catalog, TablePlans
from cdc_platform.source.stream.transactions import TransactionAssembler
from cdc_platform.testing.events import library_event

pytestmark = pytest.mark.unit

UUID = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
OTHER = "0a1b2c3d-0000-1111-2222-333344445555"


def test_merge_adds_a_gno_to_the_executed_set() -> None:
    assert merge_gtid(f"{UUID}:1-5", f"{UUID}:6") == f"{UUID}:1-6"
    assert merge_gtid(f"{UUID}:1-5:7-9", f"{UUID}:6") == f"{UUID}:1-9"
    assert merge_gtid(f"{UUID}:1-5", f"{UUID}:8") == f"{UUID}:1-5:8"
    assert merge_gtid(f"{UUID}:1-5,\n{OTHER}:1-3", f"{OTHER}:4") == f"{OTHER}:1-4,{UUID}:1-5"
    assert merge_gtid("", f"{UUID}:1") == f"{UUID}:1"
    assert merge_gtid(f"{UUID.upper()}:1-2", f"{UUID}:3") == f"{UUID}:1-3"


def test_an_unknown_or_unparsable_mysql_set_stays_unknown() -> None:
    assert merge_gtid(None, f"{UUID}:6") is None
    assert merge_gtid(f"{UUID}:tag:1-5", f"{UUID}:6") is None


def test_mariadb_states_are_unchanged() -> None:
    assert merge_gtid("0-1-5,1-2-3", "0-1-6") == "0-1-6,1-2-3"
    assert merge_gtid(None, "0-1-6") == "0-1-6"


def _mysql_transaction(start: int, gno: int) -> list[Any]:
    sid = binascii.unhexlify(UUID.replace("-", ""))
    return [
        library_event(GtidEvent, start + 79, 79, sid=sid, gno=gno),
        library_event(QueryEvent, start + 150, 71, schema=b"shop", query="BEGIN"),
        library_event(XidEvent, start + 181, 31),
    ]


def test_mysql_transactions_carry_their_gtid_into_resume_positions() -> None:
    start = ResumePosition("binlog.000003", 1000, f"{UUID}:1-5")
    tables = TableFilter([r"shop\..*"], [])
    plans = TablePlans(tables, lambda db, table: Catalog(), is_mariadb=False)
    assembler = TransactionAssembler(start, plans, AssemblySettings(tables, lambda: 100.0))
    events = []
    for event in [*_mysql_transaction(1000, 6), *_mysql_transaction(1181, 7)]:
        events.extend(assembler.feed(event))
    # Nothing captured: the first COMMIT is handed out, the second held back (at most 1/s).
    (commit,) = events
    assert commit.kind is EventKind.COMMIT
    assert commit.txn.gtid == f"{UUID}:6"
    assert commit.txn.gtid_set_before == f"{UUID}:1-5"
    assert commit.resume_after().gtid_set == f"{UUID}:1-6"
    restart = assembler.restart()
    assert (restart.file, restart.pos) == ("binlog.000003", 1362)
    assert restart.gtid_set == f"{UUID}:1-7"
