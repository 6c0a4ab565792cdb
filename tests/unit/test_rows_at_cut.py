"""A snapshot chunk's rows written as columns equal the same rows written as events."""

from __future__ import annotations

from datetime import UTC, datetime

import pyarrow as pa
import pytest

from cdc_platform.backfill.segments import events_at_cut
from cdc_platform.events import (
    BinlogPosition,
    ChangeEvent,
    EventKind,
    Op,
    ResumePosition,
    Transaction,
)
from cdc_platform.sink.schema import RowsAtCut, events_to_table
from cdc_platform.source.reading.table_description import SnapshotTable

pytestmark = pytest.mark.unit

CUT = ResumePosition(file="mysql-bin.000003", pos=4711, gtid_set="0-1-9")
SPEC = SnapshotTable("shop", "orders", (), ("id",), '[{"name":"id"}]')
ROWS = [('{"id":1}', '{"id":1,"v":"é"}'), ('{"id":2}', '{"id":2,"v":null}')]


def _update() -> ChangeEvent:
    txn = Transaction(
        start=BinlogPosition("mysql-bin.000003", 4000),
        gtid="0-1-9",
        gtid_set_before=None,
        server_id=1,
        timestamp=1_700_000_000,
    )
    return ChangeEvent(
        EventKind.ROW,
        txn,
        BinlogPosition("mysql-bin.000003", 4600),
        0,
        db="shop",
        table="orders",
        op=Op.UPDATE,
        pk='{"id":3}',
        before='{"id":3,"v":"a"}',
        after='{"id":3,"v":"b"}',
        columns=SPEC.columns_json,
    )


def _table(events: list[ChangeEvent], snapshot: RowsAtCut | None = None) -> pa.Table:
    return events_to_table(
        events,
        first_seq=41,
        batch_seq=7,
        epoch=2,
        resume=CUT,
        committed_at=datetime(2026, 11, 25, 12, 0, tzinfo=UTC),
        snapshot=snapshot,
    )


def test_rows_at_cut_are_the_rows_events_at_cut_makes() -> None:
    events = events_at_cut(SPEC, CUT, ROWS)
    stamp = events[0].txn.timestamp
    as_events = _table([_update(), *events])
    as_columns = _table(
        [_update()],
        RowsAtCut(
            "shop",
            "orders",
            SPEC.columns_json,
            CUT.binlog_position,
            stamp,
            [pk for pk, _ in ROWS],
            [image for _, image in ROWS],
        ),
    )
    assert as_columns.num_rows == 3
    assert as_columns.to_pylist() == as_events.to_pylist()
    assert as_columns.schema == as_events.schema


def test_rows_at_cut_need_an_image_per_key() -> None:
    with pytest.raises(ValueError, match="2 keys but 1 row images"):
        RowsAtCut("shop", "t", "[]", CUT.binlog_position, 0, ["a", "b"], ["x"])
