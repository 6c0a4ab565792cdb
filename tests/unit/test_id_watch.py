"""The id-watch source's pure logic: stable cut, list diff, list timer, positions, events."""

from __future__ import annotations

import json
import random

import pytest

from cdc_platform.config.id_watch import IdWatchTableConfig
from cdc_platform.errors import CheckpointError
from cdc_platform.events import EventKind, Op, ResumePosition
from cdc_platform.source.id_watch.emitter import ROW_FILE
from cdc_platform.source.id_watch.emitter import Emitter as _Emitter
from cdc_platform.source.id_watch.state import (
    Change,
    KnownState,
    ListSchedule,
    WatchPosition,
    WatchRow,
    next_list_delay,
    stable_prefix,
)
from cdc_platform.source.id_watch.tables import WatchedTable
from cdc_platform.source.reading.table_description import SnapshotTable
from cdc_platform.testing.fakes import FakeClock

pytestmark = pytest.mark.unit


def row(id_: int, *, stable: bool = True, name: str = "x") -> WatchRow:
    return WatchRow(id_, json.dumps({"id": id_}), json.dumps({"id": id_, "name": name}), stable)


# -- stable prefix -----------------------------------------------------------------------------


def test_stable_prefix_stops_at_the_first_unstable_row() -> None:
    rows = [row(1), row(2), row(3, stable=False), row(4), row(5)]
    prefix, cut = stable_prefix(rows)
    assert [r.id for r in prefix] == [1, 2]
    assert cut, "a later stable row must wait: a lower id may still be uncommitted"


def test_stable_prefix_of_an_all_stable_page_is_the_page() -> None:
    prefix, cut = stable_prefix([row(1), row(2)])
    assert [r.id for r in prefix] == [1, 2]
    assert not cut


def test_stable_prefix_of_a_young_first_row_is_empty() -> None:
    assert stable_prefix([row(7, stable=False), row(8)]) == ([], True)
    assert stable_prefix([]) == ([], False)


# -- known state and diff ----------------------------------------------------------------------


def test_diff_new_changed_and_same() -> None:
    known = KnownState()
    first = known.diff("db.t", [('{"id":1}', '{"id":1,"v":1}')], new_op=Op.INSERT)
    assert first == [Change(Op.INSERT, '{"id":1}', '{"id":1,"v":1}')]
    known.apply("db.t", first)
    assert known.diff("db.t", [('{"id":1}', '{"id":1,"v":1}')], new_op=Op.INSERT) == []
    changed = known.diff("db.t", [('{"id":1}', '{"id":1,"v":2}')], new_op=Op.INSERT)
    assert changed == [Change(Op.SNAPSHOT, '{"id":1}', '{"id":1,"v":2}')], "known key: upsert"
    assert known.diff("db.t", [('{"id":2}', "{}")], new_op=Op.SNAPSHOT)[0].op is Op.SNAPSHOT


def test_gone_lists_known_keys_the_list_did_not_see() -> None:
    known = KnownState()
    known.apply("db.t", [Change(Op.INSERT, f'{{"id":{i}}}', "{}") for i in range(1, 5)])
    known.apply("db.other", [Change(Op.INSERT, '{"id":9}', "{}")])
    gone = known.gone("db.t", {'{"id":1}', '{"id":3}', '{"id":99}'})
    assert gone == ['{"id":2}', '{"id":4}']
    known.apply("db.t", [Change(Op.DELETE, pk, None) for pk in gone])
    assert known.size("db.t") == 2
    assert known.size("db.other") == 1


# -- list timer --------------------------------------------------------------------------------


def test_list_delay_is_uniform_within_the_interval() -> None:
    rng = random.Random(4)
    delays = [next_list_delay((15.0, 30.0), rng) for _ in range(2000)]
    assert min(delays) >= 15 * 60
    assert max(delays) <= 30 * 60
    assert min(delays) < 16 * 60, "covers the low end"
    assert max(delays) > 29 * 60, "covers the high end"
    assert next_list_delay((2.0, 2.0), rng) == 120.0


def test_list_schedule_is_due_at_once_then_after_the_drawn_delay() -> None:
    clock = FakeClock()
    schedule = ListSchedule((1.0, 2.0), clock, random.Random(1))
    assert schedule.due(), "the first list runs at start"
    delay = schedule.listed()
    assert 60.0 <= delay <= 120.0
    assert not schedule.due()
    clock.advance(delay - 0.001)
    assert not schedule.due()
    clock.advance(0.001)
    assert schedule.due()
    again = schedule.listed()
    assert again != delay, "randomized each time"


# -- positions ---------------------------------------------------------------------------------


def test_position_round_trips_through_resume_json() -> None:
    position = WatchPosition({"shop.orders": 1234, "shop.items": 0}, 77)
    resume = position.to_resume()
    assert resume.pos == 77
    back = WatchPosition.from_resume(ResumePosition.from_json(resume.to_json()))
    assert back == position
    assert str(resume).startswith("id_watch:")


def test_a_binlog_position_is_refused_clearly() -> None:
    with pytest.raises(CheckpointError, match="not an id_watch position"):
        WatchPosition.from_resume(ResumePosition("mysql-bin.000003", 4))
    with pytest.raises(CheckpointError, match="unreadable"):
        WatchPosition.from_resume(ResumePosition('id_watch:{"v":9,"last":{}}', 1))


# -- transactions ------------------------------------------------------------------------------


def table(name: str = "shop.items") -> WatchedTable:
    db, tbl = name.split(".")
    settings = IdWatchTableConfig(table=name, id_column="id", created_column="created")
    spec = SnapshotTable(db, tbl, (), ("id",), '[{"name":"id"}]')
    return WatchedTable(settings, spec, "datetime")


def test_a_transaction_carries_the_state_after_it_and_before_it() -> None:
    clock = FakeClock()
    emitter = _Emitter(WatchPosition({"shop.items": 10}, 5), server_id=9, wall=clock)
    changes = [Change(Op.INSERT, f'{{"id":{i}}}', f'{{"id":{i}}}') for i in (11, 12, 13)]
    events = emitter.transaction(table(), changes, last_id=13)
    assert [e.kind for e in events] == [EventKind.ROW] * 3 + [EventKind.COMMIT]
    assert [e.index for e in events] == [0, 1, 2, 3]
    assert all(e.position.file == ROW_FILE and e.position.pos == 6 for e in events[:3])
    assert events[0].columns == '[{"name":"id"}]'
    assert events[0].txn.server_id == 9
    assert events[0].txn.timestamp == int(clock.time())
    # After the commit: the new last id, the transaction number as pos.
    after = WatchPosition.from_resume(events[-1].resume_after())
    assert after == WatchPosition({"shop.items": 13}, 6)
    # Inside the transaction (a chunk larger than the store was committed): the state before,
    # so a restart reads those rows again and the known state drops the committed ones.
    inside = events[1].resume_after()
    assert inside.skip_events == 2
    assert WatchPosition.from_resume(inside) == WatchPosition({"shop.items": 10}, 6)


def test_deletes_carry_the_key_as_before_image() -> None:
    emitter = _Emitter(WatchPosition({"shop.items": 10}, 0), server_id=1, wall=FakeClock())
    events = emitter.transaction(table(), [Change(Op.DELETE, '{"id":3}', None)])
    assert events[0].op is Op.DELETE
    assert events[0].before == '{"id":3}'
    assert events[0].after is None
    assert WatchPosition.from_resume(events[-1].resume_after()).last_ids == {"shop.items": 10}


def test_a_position_only_transaction_moves_the_watch() -> None:
    emitter = _Emitter(WatchPosition({"shop.items": 0}, 3), server_id=1, wall=FakeClock())
    emitter.last_ids["shop.items"] = 500  # read 500 known rows, nothing to emit
    events = emitter.transaction(None, ())
    assert [e.kind for e in events] == [EventKind.COMMIT]
    assert WatchPosition.from_resume(events[0].resume_after()) == WatchPosition(
        {"shop.items": 500}, 4
    )
    assert emitter.emitted == emitter.last_ids


def test_row_identities_are_unique_across_transactions() -> None:
    emitter = _Emitter(WatchPosition({"shop.items": 0}, 0), server_id=1, wall=FakeClock())
    seen: set[tuple[str, int, int]] = set()
    for n in range(1, 4):
        changes = [Change(Op.INSERT, f'{{"id":{n}{i}}}', "{}") for i in range(3)]
        for event in emitter.transaction(table(), changes, last_id=n * 10):
            key = (event.position.file, event.position.pos, event.index)
            assert key not in seen
            seen.add(key)
            assert event.sort_key() is not None
