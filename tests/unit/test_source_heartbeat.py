"""Server heartbeats on an idle stream become idle COMMITs at the last transaction boundary.

The assembler is fed the library's own event classes with their fields set the way the
library's parser sets them (as in test_mysql_gtids.py).
"""

from __future__ import annotations

from typing import Any

import pytest
from pymysqlreplication.event import (
    HeartbeatLogEvent,
    MariadbGtidEvent,
    QueryEvent,
    RotateEvent,
    XidEvent,
)

from cdc_platform.events import EventKind, ResumePosition
from cdc_platform.source.filters import TableFilter
from cdc_platform.source.stream.boundaries import AssemblySettings
from cdc_platform.source.stream.table_maps import Catalog, TablePlans
from cdc_platform.source.stream.transactions import TransactionAssembler
from cdc_platform.testing.events import library_event

pytestmark = pytest.mark.unit


def _assembler(
    start: ResumePosition, wall: list[float], *, heartbeats: bool = True
) -> TransactionAssembler:
    tables = TableFilter([r"shop\..*"], [])
    plans = TablePlans(tables, lambda db, table: Catalog(), is_mariadb=True)
    return TransactionAssembler(
        start,
        plans,
        AssemblySettings(
            tables, clock=lambda: 100.0, wall_clock=lambda: wall[0], heartbeats=heartbeats
        ),
    )


def _heartbeat(pos: int) -> Any:
    return library_event(HeartbeatLogEvent, pos, 19, timestamp=0, ident="mysql-bin.000001")


def test_a_heartbeat_outside_a_transaction_is_an_idle_commit_at_the_boundary() -> None:
    wall = [1_800_000_123.7]
    assembler = _assembler(ResumePosition("mysql-bin.000001", 400, "0-1-5"), wall)
    (idle,) = assembler.feed(_heartbeat(400))
    assert idle.kind is EventKind.COMMIT
    assert idle.txn.idle
    assert idle.txn.timestamp == 1_800_000_123
    assert idle.resume_after() == ResumePosition("mysql-bin.000001", 400, "0-1-5")

    # A transaction on a table not captured moves the boundary and the GTID state.
    group = [
        library_event(MariadbGtidEvent, 480, 80, gtid="0-1-6", flags=0),
        library_event(QueryEvent, 560, 80, schema=b"other", query="BEGIN"),
        library_event(XidEvent, 600, 40),
    ]
    (quiet,) = [out for event in group for out in assembler.feed(event)]
    assert not quiet.txn.idle
    wall[0] += 5
    (idle,) = assembler.feed(_heartbeat(600))
    assert idle.txn.idle
    assert idle.resume_after() == ResumePosition("mysql-bin.000001", 600, "0-1-6")
    assert idle.txn.timestamp == 1_800_000_128


def test_no_idle_commit_inside_an_open_transaction() -> None:
    assembler = _assembler(ResumePosition("mysql-bin.000001", 400, "0-1-5"), [1.0e9])
    assembler.feed(library_event(MariadbGtidEvent, 480, 80, gtid="0-1-6", flags=0))
    assert assembler.feed(_heartbeat(480)) == []


def test_after_a_rotation_the_idle_commit_is_in_the_new_file() -> None:
    assembler = _assembler(ResumePosition("mysql-bin.000001", 400, "0-1-5"), [1.0e9])
    assembler.feed(library_event(RotateEvent, 450, 50, next_binlog="mysql-bin.000002", position=4))
    (idle,) = assembler.feed(_heartbeat(4))
    assert idle.resume_after() == ResumePosition("mysql-bin.000002", 4, "0-1-5")


def test_without_heartbeats_asked_for_a_heartbeat_emits_nothing() -> None:
    """The snapshot's segment stream cuts on a quiet stream: it does not ask for them."""
    assembler = _assembler(ResumePosition("mysql-bin.000001", 400), [1.0e9], heartbeats=False)
    assert assembler.feed(_heartbeat(400)) == []
