"""Snapshot helpers without a server: value conversions, key encoding, the segment cut."""

from __future__ import annotations

import json
from decimal import Decimal

import pymysql
import pytest

from cdc_platform.backfill.segments import (
    SegmentReader,
    SegmentStream,
    SegmentTail,
    touched_keys,
)
from cdc_platform.errors import SourceConnectionError, SourceError
from cdc_platform.events import (
    BinlogPosition,
    ChangeEvent,
    EventKind,
    Op,
    ResumePosition,
    Transaction,
)
from cdc_platform.source.mysql_errors import is_missing_table, mysql_error
from cdc_platform.source.reading.column_reads import ColumnRead, column_read
from cdc_platform.source.reading.row_keys import decode_key, encode_key
from cdc_platform.source.reading.table_description import SnapshotTable
from cdc_platform.source.sql import format_safe, quote_identifier

pytestmark = pytest.mark.unit


def _column(data_type: str, column_type: str = "", **info: object) -> ColumnRead:
    """How the snapshot reads a column of ``data_type`` (its information_schema row)."""
    row = {"COLUMN_NAME": "c", "DATA_TYPE": data_type, "COLUMN_TYPE": column_type or data_type}
    return column_read({**row, **info}, logical_json=False, pk=False)


def test_value_conversions_match_the_binlog_representation() -> None:
    assert _column("float").convert(1.100000023841858) == 1.1
    assert _column("bit", "bit(10)", NUMERIC_PRECISION=10).convert(b"\x00\x05") == "0000000101"
    timestamp = _column("timestamp", DATETIME_PRECISION=3).convert
    assert timestamp("2024-06-01 06:30:00.250") == "2024-06-01T06:30:00.250Z"
    assert timestamp("0000-00-00 00:00:00.000") == "0000-00-00 00:00:00.000"
    labels = _column("set", "set('x','y','z')")
    assert labels.convert("") == []
    assert labels.convert("x,z") == ["x", "z"]
    enum = _column("enum", "enum('a','it''s','c,d')")
    assert enum.described["values"] == ["a", "it's", "c,d"]


def test_keys_survive_the_progress_file() -> None:
    key = [1, "a", b"\x00\xff", Decimal("1.50")]
    assert decode_key(json.loads(json.dumps(encode_key(key)))) == key


def _txn(start: int) -> Transaction:
    return Transaction(BinlogPosition("b.000001", start), None, None, 1, 0)


def _row(txn: Transaction, pos: int, index: int, pk: int) -> ChangeEvent:
    image = json.dumps({"id": pk}, separators=(",", ":"))
    return ChangeEvent(
        EventKind.ROW,
        txn,
        BinlogPosition("b.000001", pos),
        index,
        db="d",
        table="t",
        op=Op.UPDATE,
        pk=json.dumps({"id": pk + 100}, separators=(",", ":")),
        before=image,
        after=image,
    )


def _commit(txn: Transaction, pos: int, index: int) -> ChangeEvent:
    return ChangeEvent(EventKind.COMMIT, txn, BinlogPosition("b.000001", pos), index)


class _FakeSource:
    server = None

    def __init__(self, events: list[ChangeEvent]) -> None:
        self._events = events

    def events(self) -> list[ChangeEvent]:
        return self._events

    def stop(self) -> None:
        return None


def test_segment_ends_at_the_first_transaction_after_the_high_watermark() -> None:
    t1, t2 = _txn(100), _txn(200)
    events = [_row(t1, 150, 0, 1), _commit(t1, 200, 1), _row(t2, 250, 0, 2), _commit(t2, 300, 1)]
    stream = SegmentStream(_FakeSource(events))
    start = ResumePosition("b.000001", 100)
    segment, cut = stream.until(BinlogPosition("b.000001", 180), start)
    assert segment == events[:2]
    assert cut.pos == 200
    assert touched_keys(segment, "d", "t", ["id"]) == {'{"id":101}', '{"id":1}'}
    # The next transaction was held back for the next segment, not lost.
    segment, cut = stream.until(BinlogPosition("b.000001", 300), cut)
    assert segment == events[2:]
    assert cut.pos == 300


def test_segment_part_stops_at_a_transaction_end_once_the_limit_is_reached() -> None:
    t1, t2, t3 = _txn(100), _txn(200), _txn(300)
    events = [
        _row(t1, 150, 0, 1),
        _row(t1, 160, 1, 2),
        _commit(t1, 200, 2),
        _row(t2, 250, 0, 3),
        _commit(t2, 300, 1),
        _row(t3, 350, 0, 4),
        _commit(t3, 400, 1),
    ]
    stream = SegmentStream(_FakeSource(events))
    high = BinlogPosition("b.000001", 400)
    part, cut, complete = stream.part(high, ResumePosition("b.000001", 100), 2)
    assert (part, cut.pos, complete) == (events[:3], 200, False)  # t1 kept whole
    part, cut, complete = stream.part(high, cut, 2)
    assert (part, cut.pos, complete) == (events[3:5], 300, False)
    part, cut, complete = stream.part(high, cut, 2)
    assert (part, cut.pos, complete) == (events[5:], 400, True)


def test_a_chunk_drops_the_keys_the_previous_segment_touched() -> None:
    """The watermark race: an UPDATE of key 5 is in the binlog before chunk 2's low cut (in
    chunk 1's segment), but InnoDB did not show it yet to chunk 2's SELECT, which read key 5's
    old row. Chunk 2's own segment is empty, so only the carried tail drops key 5; otherwise
    its stale `r` row, placed after the UPDATE, would revert it."""
    spec = SnapshotTable("d", "t", (), ("id",), "[]")
    t1 = _txn(100)
    events = [_row(t1, 150, 0, 5), _commit(t1, 200, 1)]  # touches {"id":5} and {"id":105}
    stream = SegmentStream(_FakeSource(events))
    tail = SegmentTail(100)
    parts: list[list[ChangeEvent]] = []
    high = BinlogPosition("b.000001", 200)

    def read(chunk_keys: set[str], cut: ResumePosition) -> tuple[set[str], ResumePosition]:
        segment = SegmentReader(stream, tail, 100).chunk_segment(
            spec,
            chunk_keys,
            high=high,
            cut=cut,
            commit_part=lambda part, _cut: parts.append(part),
        )
        return segment.touched, segment.cut

    touched, cut = read({'{"id":1}', '{"id":2}'}, ResumePosition("b.000001", 100))
    assert touched == set()  # chunk 1 does not hold key 5
    assert cut.pos == 200
    touched, cut = read({'{"id":5}', '{"id":6}'}, cut)  # chunk 2: its segment is empty
    assert touched == {'{"id":5}'}
    assert cut.pos == 200
    assert parts == []
    # The tail is bounded: the newest `limit` row events only.
    small = SegmentTail(1)
    small.extend([_row(t1, 150, 0, 7), _row(t1, 160, 1, 8), _commit(t1, 200, 2)])
    assert small.touched("d", "t", ["id"]) == {'{"id":8}', '{"id":108}'}


def test_identifiers_are_quoted_and_driver_errors_translated() -> None:
    assert quote_identifier("we`ird.t ab") == "`we``ird.t ab`"
    assert format_safe(quote_identifier("50%")) == "`50%%`"
    lost = mysql_error(pymysql.err.OperationalError(2013, "Lost connection"), "snapshot")
    assert isinstance(lost, SourceConnectionError)
    assert lost.transient
    syntax = mysql_error(pymysql.err.ProgrammingError(1064, "syntax"), "snapshot")
    assert type(syntax) is SourceError
    assert not syntax.transient
    assert is_missing_table(pymysql.err.ProgrammingError(1146, "no such table"))
