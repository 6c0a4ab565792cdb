"""The repair's decision per suspected key and its note of its own commits (no servers)."""

from __future__ import annotations

import pytest

from cdc_platform.backfill.repair import _COMMITTED_NOW, RepairKey, _decide, _note_committed
from cdc_platform.events import BinlogPosition, ChangeEvent, EventKind, Op, Transaction
from cdc_platform.source.reading.table_description import SnapshotTable

pytestmark = pytest.mark.unit


def test_repair_decision_skips_touched_and_lagging_keys() -> None:
    keys = [RepairKey([i], f'{{"id":{i}}}') for i in range(1, 7)]
    source = {
        '{"id":1}': "img1",  # touched by the binlog segment: left to it
        '{"id":2}': "img2",  # log is newer than the mirror and equal: only lagged
        '{"id":3}': "img3",  # log equal but not newer than the mirror: the mirror lost it
        '{"id":4}': "img4-quiet",  # changed behind the binlog's back
        # 5: gone from the source, the log still has it
        # 6: gone from the source, the log deleted it after the mirror's state: lagged
        '{"id":9}': "img9",  # returned under another spelling of a suspect: true state
    }
    logged = {
        '{"id":1}': (50, "old1"),
        '{"id":2}': (40, "img2"),
        '{"id":3}': (20, "img3"),
        '{"id":4}': (20, "img4"),
        '{"id":5}': (10, "img5"),
        '{"id":6}': (45, None),
    }
    upserts, deletes, skipped = _decide(keys, source, {'{"id":1}'}, logged, mirror_seq=30)
    assert upserts == [('{"id":3}', "img3"), ('{"id":4}', "img4-quiet"), ('{"id":9}', "img9")]
    assert deletes == ['{"id":5}']
    assert skipped == 3


def test_repair_notes_its_own_commits_instead_of_rereading_the_log() -> None:
    spec = SnapshotTable("db", "t", (), ("id",), "[]")
    at = BinlogPosition("b.000001", 4)
    txn = Transaction(start=at, gtid=None, gtid_set_before=None, server_id=1, timestamp=0)

    def row(
        op: Op, pk: str, before: str | None, after: str | None, table: str = "t"
    ) -> ChangeEvent:
        return ChangeEvent(
            EventKind.ROW,
            txn,
            at,
            0,
            db="db",
            table=table,
            op=op,
            pk=pk,
            before=before,
            after=after,
        )

    logged = {'{"id":1}': (5, "old1"), '{"id":9}': (5, "img9")}
    _note_committed(
        logged,
        [
            row(Op.UPDATE, '{"id":2}', '{"id":1,"v":0}', '{"id":2,"v":1}'),  # key 1 -> 2
            row(Op.DELETE, '{"id":3}', '{"id":3}', None),
            row(Op.INSERT, '{"id":9}', None, "other table", table="u"),  # not this table
        ],
        spec,
    )
    assert logged == {
        '{"id":1}': (_COMMITTED_NOW, None),
        '{"id":2}': (_COMMITTED_NOW, '{"id":2,"v":1}'),
        '{"id":3}': (_COMMITTED_NOW, None),
        '{"id":9}': (5, "img9"),
    }
