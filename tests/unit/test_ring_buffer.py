"""EventStore: Canal's ring buffer semantics plus whole-transaction batches and chunking."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar, cast

import pytest

from cdc_platform.errors import StoreError, UnknownPositionError
from cdc_platform.events import ChangeEvent, EventKind
from cdc_platform.store import (
    Batch,
    BatchMode,
    EventStore,
    PartialPutError,
    StoreClosedError,
    StoreStats,
)
from cdc_platform.testing.events import EventBuilder

pytestmark = pytest.mark.unit

T = TypeVar("T")

WAIT = 10.0
"""Generous bound for something that must happen; tests never assert durations."""
BLOCKED = 0.2
"""How long a call must stay blocked before we believe it is waiting."""


def item_store(buffer_size: int = 16, *, ddl_isolation: bool = False) -> EventStore:
    return EventStore(buffer_size, batch_mode=BatchMode.ITEMSIZE, ddl_isolation=ddl_isolation)


class Background(Generic[T]):
    """Runs a call in a thread and keeps its result or exception, to test blocking calls."""

    def __init__(self, call: Callable[[], T]) -> None:
        self.done = threading.Event()
        self.result: T | None = None
        self.error: BaseException | None = None

        def run() -> None:
            try:
                self.result = call()
            except BaseException as exc:  # handed to the test thread
                self.error = exc
            finally:
                self.done.set()

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()

    def assert_blocked(self) -> None:
        assert not self.done.wait(BLOCKED), "the call returned instead of blocking"

    def join(self) -> T:
        assert self.done.wait(WAIT), "the call stayed blocked"
        self.thread.join(WAIT)
        if self.error is not None:
            raise self.error
        return cast(T, self.result)


@pytest.fixture
def builder() -> EventBuilder:
    return EventBuilder()


# ---------------------------------------------------------------------- construction


@pytest.mark.parametrize("size", [0, -4, 3, 1000, 1023])
def test_capacity_must_be_a_power_of_two(size: int) -> None:
    with pytest.raises(StoreError, match=f"buffer_size must be a power of two, got {size}"):
        EventStore(size)


@pytest.mark.parametrize("size", [1, 2, 1024])
def test_power_of_two_capacities_are_accepted(size: int) -> None:
    assert EventStore(size).stats().capacity_items == size


def test_memunit_must_be_positive() -> None:
    with pytest.raises(StoreError, match="memunit"):
        EventStore(8, memunit=0)


def test_batch_size_must_be_positive(builder: EventBuilder) -> None:
    store = item_store()
    with pytest.raises(StoreError, match="batch_size must be at least 1, got 0"):
        store.try_get(0)


def test_batch_modes_match_canal_config_values() -> None:
    assert BatchMode("ITEMSIZE") is BatchMode.ITEMSIZE
    assert BatchMode("MEMSIZE") is BatchMode.MEMSIZE


def test_capacity_bytes_only_in_memsize_mode() -> None:
    assert EventStore(8, memunit=100).stats().capacity_bytes == 800
    assert item_store(8).stats().capacity_bytes is None


# ---------------------------------------------------------------------- put / get basics


def test_empty_store_gives_empty_batch() -> None:
    batch = item_store().try_get(10)
    assert batch == Batch(())
    assert batch.first is None
    assert batch.last is None
    assert batch.ack_point is None
    assert batch.resume_position() is None
    assert batch.size_bytes == 0
    assert not batch.partial


def test_put_of_nothing_succeeds() -> None:
    store = item_store(1)
    assert store.try_put([])
    assert store.put([], timeout=0)
    assert store.stats().items == 0


def test_batch_ends_at_boundary_and_leaves_trailing_partial_transaction(
    builder: EventBuilder,
) -> None:
    store = item_store()
    first = builder.transaction(2)
    second = builder.transaction(3)
    assert store.try_put(first + second[:2])

    batch = store.try_get(10)
    assert batch.events == tuple(first)
    assert batch.first == first[0]
    assert batch.last == first[-1]
    assert batch.ack_point == first[-1]
    assert batch.ack_point.kind is EventKind.COMMIT
    assert not batch.partial
    assert batch.resume_position() == first[-1].resume_after()
    assert batch.size_bytes == sum(e.size for e in first)
    assert store.try_get(10) == Batch(())

    assert store.try_put(second[2:])
    assert store.try_get(10).events == tuple(second)


def test_batch_stops_at_last_boundary_within_batch_size(builder: EventBuilder) -> None:
    store = item_store()
    txns = [builder.transaction(2) for _ in range(3)]
    assert store.try_put([e for t in txns for e in t])
    assert store.try_get(7).events == tuple(txns[0] + txns[1])
    assert store.try_get(3).events == tuple(txns[2])


def test_transaction_larger_than_batch_size_comes_back_whole(builder: EventBuilder) -> None:
    store = item_store()
    big = builder.transaction(6)
    small = builder.transaction(1)
    assert store.try_put(big + small)
    assert store.try_get(2).events == tuple(big)
    assert store.try_get(2).events == tuple(small)


def test_get_waits_for_a_full_batch(builder: EventBuilder) -> None:
    store = item_store()
    first, second = builder.transaction(1), builder.transaction(1)
    assert store.try_put(first)
    getter = Background(lambda: store.get(4))
    getter.assert_blocked()
    assert store.try_put(second)
    assert getter.join() == Batch(tuple(first + second))


def test_get_timeout_returns_whole_transactions_available(builder: EventBuilder) -> None:
    store = item_store()
    txn = builder.transaction(1)
    assert store.try_put(txn + builder.transaction(3)[:2])
    assert store.get(100, timeout=0.05).events == tuple(txn)
    assert store.get(100, timeout=0.05) == Batch(())


def test_get_max_age_cuts_the_batch_once_the_oldest_event_has_waited_that_long(
    builder: EventBuilder,
) -> None:
    """A consumer back late (a slow commit, a compaction) takes what waits at once: the
    batch timeout counts from the oldest event's arrival, not from the call."""
    store = item_store()
    txn = builder.transaction(1)
    assert store.try_put(txn)
    getter = Background(lambda: store.get(100, timeout=3600, max_age=0.01))
    assert getter.join().events == tuple(txn)


def test_get_max_age_waits_for_a_first_event_then_for_the_batch(builder: EventBuilder) -> None:
    store = item_store()
    getter = Background(lambda: store.get(100, timeout=3600, max_age=0.01))
    getter.assert_blocked()  # nothing waits yet: no age to reach
    first, rest = builder.transaction(1), builder.transaction(3)[:2]
    assert store.try_put(first + rest)
    assert getter.join().events == tuple(first)
    partial = Background(lambda: store.get(100, timeout=3600, max_age=0.01))
    partial.assert_blocked()  # the rest is no whole transaction: nothing to hand out yet
    store.close()
    with pytest.raises(StoreClosedError):
        partial.join()


def test_get_with_batch_larger_than_store_returns_when_store_is_full(
    builder: EventBuilder,
) -> None:
    store = item_store(4)
    getter = Background(lambda: store.get(100))
    txns = [builder.transaction(1) for _ in range(2)]
    assert store.try_put(txns[0])
    getter.assert_blocked()
    assert store.try_put(txns[1])
    assert getter.join() == Batch(tuple(txns[0] + txns[1]))


def test_wrap_around_many_times(builder: EventBuilder) -> None:
    store = item_store(8)
    sizes = [0, 1, 2, 3, 4, 5, 6, 7]
    delivered: list[ChangeEvent] = []
    expected: list[ChangeEvent] = []
    for round_ in range(200):
        txn = builder.transaction(sizes[round_ % len(sizes)])
        expected += txn
        assert store.try_put(txn)
        batch = store.try_get(3)
        assert batch.events == tuple(txn)
        assert batch.ack_point is not None
        store.ack(batch.ack_point)
        delivered += batch.events
    assert delivered == expected
    stats = store.stats()
    assert stats.put_count == stats.get_count == stats.ack_count == len(expected)
    assert stats.put_count > 50 * stats.capacity_items
    assert (stats.items, stats.bytes) == (0, 0)


def test_events_stay_in_order_across_the_wrap_with_unacked_backlog(
    builder: EventBuilder,
) -> None:
    store = item_store(4)
    stream = [builder.transaction(0) for _ in range(40)]  # single COMMITs
    delivered: list[ChangeEvent] = []
    pending = list(stream)
    while pending or store.stats().items:
        while pending and store.try_put(pending[0]):
            pending.pop(0)
        batch = store.try_get(3)
        delivered += batch.events
        if batch.ack_point is not None:
            store.ack(batch.ack_point)
    assert delivered == [e for t in stream for e in t]


@pytest.mark.parametrize("mode", list(BatchMode))
def test_producer_and_consumer_threads_stream_everything_in_order(
    builder: EventBuilder, mode: BatchMode
) -> None:
    rng = random.Random(7)
    stream: list[ChangeEvent] = []
    for _ in range(300):
        if rng.random() < 0.1:
            stream.append(builder.ddl())
        else:  # up to three times the store
            stream += builder.transaction(rng.randrange(24), payload=rng.randrange(200))
    store = EventStore(8, memunit=200, batch_mode=mode, ddl_isolation=True)

    def produce() -> bool:
        at = 0
        while at < len(stream):
            count = rng.randrange(1, 12)
            assert store.put(stream[at : at + count])
            at += count
        return True

    producer = Background(produce)
    delivered: list[ChangeEvent] = []
    while len(delivered) < len(stream):
        finished = producer.done.is_set()
        batch = store.get(3, timeout=0.05)
        if batch.ack_point is not None:
            assert batch.partial or batch.ack_point.ends_transaction
            store.ack(batch.ack_point)
        delivered += batch.events
        assert batch.events or not finished or store.stats().items, "events were lost"
    assert producer.join() is True
    assert delivered == stream


# ---------------------------------------------------------------------- memory (MEMSIZE)


def test_memory_limit_uses_real_event_sizes(builder: EventBuilder) -> None:
    first = builder.transaction(2, payload=200)
    second = builder.transaction(2, payload=200)
    limit = sum(e.size for e in first) + 10  # room for one transaction, never two
    store = EventStore(8, memunit=limit // 8 + 1)
    capacity = store.stats().capacity_bytes
    assert capacity is not None
    assert capacity < sum(e.size for e in first + second)

    assert store.try_put(first)
    assert store.stats().bytes == sum(e.size for e in first)
    assert not store.try_put(second)
    assert store.stats().items == 3  # slots were free; memory was not

    batch = store.try_get(1)
    assert batch.events == tuple(first)
    assert not store.try_put(second)  # got but not acked still holds memory
    assert batch.ack_point is not None
    store.ack(batch.ack_point)
    assert store.try_put(second)
    assert store.stats().bytes == sum(e.size for e in second)


def test_memsize_batch_counts_bytes(builder: EventBuilder) -> None:
    txns = [builder.transaction(1, payload=300) for _ in range(4)]
    txn_bytes = sum(e.size for e in txns[0])
    store = EventStore(64, memunit=txn_bytes)
    assert store.try_put([e for t in txns for e in t])
    # batch_size counts memunits: two units hold two transactions.
    assert store.try_get(2).events == tuple(txns[0] + txns[1])
    getter = Background(lambda: store.get(3))
    getter.assert_blocked()  # two transactions left: less than three units
    assert store.try_put(builder.transaction(1, payload=300))
    assert len(getter.join().events) == 6


def test_event_larger_than_memory_limit_goes_alone_into_empty_store(
    builder: EventBuilder,
) -> None:
    store = EventStore(4, memunit=10)
    huge = builder.transaction(1, payload=1000)
    assert huge[0].size > 4 * 10
    assert store.try_put(huge[:1])
    assert not store.try_put(huge[1:])
    batch = store.try_get(1)
    assert batch.events == (huge[0],)
    assert batch.partial  # the store is full inside the transaction
    store.ack(huge[0])
    assert store.try_put(huge[1:])
    assert store.try_get(1).events == (huge[1],)


# ---------------------------------------------------------------------- DDL isolation


def test_ddl_isolation_returns_ddl_alone(builder: EventBuilder) -> None:
    store = item_store(ddl_isolation=True)
    before = builder.transaction(2)
    ddl = builder.ddl()
    after = builder.transaction(1)
    assert store.try_put([*before, ddl, *after])
    assert store.try_get(100).events == tuple(before)
    batch = store.try_get(100)
    assert batch.events == (ddl,)
    assert batch.resume_position() == ddl.resume_after()
    assert store.try_get(100).events == tuple(after)


def test_consecutive_ddls_come_back_one_by_one(builder: EventBuilder) -> None:
    store = item_store(ddl_isolation=True)
    ddls = [builder.ddl(f"CREATE TABLE t{i} (id INT)") for i in range(3)]
    assert store.try_put(ddls)
    assert [store.try_get(10).events for _ in ddls] == [(d,) for d in ddls]


def test_ddl_makes_a_waiting_get_return(builder: EventBuilder) -> None:
    store = item_store(ddl_isolation=True)
    txn = builder.transaction(1)
    assert store.try_put(txn)
    getter = Background(lambda: store.get(100))
    getter.assert_blocked()
    assert store.try_put([builder.ddl()])
    assert getter.join() == Batch(tuple(txn))


def test_rows_left_without_commit_before_a_ddl_come_back_with_it(builder: EventBuilder) -> None:
    store = item_store(ddl_isolation=True)
    unfinished = builder.transaction(2)[:2]
    ddl = builder.ddl()
    assert store.try_put([*unfinished, ddl])
    assert store.try_get(100).events == (*unfinished, ddl)


def test_without_isolation_ddl_is_just_a_boundary(builder: EventBuilder) -> None:
    store = item_store()
    events = [*builder.transaction(1), builder.ddl(), *builder.transaction(1)]
    assert store.try_put(events)
    assert store.try_get(100).events == tuple(events)


# ---------------------------------------------------------------------- ack / rollback


def test_ack_frees_up_to_the_event_and_wakes_putter(builder: EventBuilder) -> None:
    store = item_store(4)
    first, second = builder.transaction(1), builder.transaction(1)
    assert store.try_put(first + second)
    batch = store.try_get(4)
    third = builder.transaction(0)
    putter = Background(lambda: store.put(third))
    putter.assert_blocked()
    store.ack(batch.events[1])  # first transaction only
    assert putter.join() is True
    assert store.stats().items == 3


def test_ack_by_sort_key(builder: EventBuilder) -> None:
    store = item_store()
    txn = builder.transaction(1)
    assert store.try_put(txn)
    store.try_get(10)
    store.ack(txn[-1].sort_key())
    assert store.stats().ack_count == 2


def test_ack_of_event_not_handed_out_is_refused(builder: EventBuilder) -> None:
    store = item_store()
    first, second = builder.transaction(1), builder.transaction(1)
    assert store.try_put(first + second)
    store.try_get(2)
    with pytest.raises(UnknownPositionError, match="not among the 2 events handed out"):
        store.ack(second[-1])  # stored, never got
    with pytest.raises(UnknownPositionError):
        store.ack(builder.transaction(1)[-1])  # never stored
    store.ack(first[-1])
    with pytest.raises(UnknownPositionError):
        store.ack(first[-1])  # already acked


def test_ack_after_rollback_is_refused(builder: EventBuilder) -> None:
    store = item_store()
    txn = builder.transaction(1)
    assert store.try_put(txn)
    store.try_get(10)
    store.rollback()
    with pytest.raises(UnknownPositionError):
        store.ack(txn[-1])


def test_rollback_hands_out_unacked_events_again_in_order(builder: EventBuilder) -> None:
    store = item_store()
    txns = [builder.transaction(1) for _ in range(3)]
    assert store.try_put([e for t in txns for e in t])
    first = store.try_get(2)
    store.try_get(2)
    store.try_get(2)
    store.ack(first.events[-1])
    store.rollback()
    assert store.try_get(4).events == tuple(txns[1] + txns[2])
    assert store.stats().get_count == 6 + 4  # monotonic: re-deliveries count again


def test_rollback_wakes_a_waiting_getter(builder: EventBuilder) -> None:
    store = item_store()
    txn = builder.transaction(1)
    assert store.try_put(txn)
    store.try_get(2)
    getter = Background(lambda: store.get(2))
    getter.assert_blocked()
    store.rollback()
    assert getter.join() == Batch(tuple(txn))


# ---------------------------------------------------------------------- first_position / stats


def test_first_position_follows_canal_included_flag(builder: EventBuilder) -> None:
    store = item_store()
    assert store.first_position() is None
    first, second = builder.transaction(1), builder.transaction(1)
    assert store.try_put(first + second)
    assert store.first_position() == (first[0].position, True)
    store.try_get(2)
    assert store.first_position() == (first[0].position, True)
    store.ack(first[-1])
    assert store.first_position() == (first[-1].position, False)
    store.ack(store.try_get(2).events[-1])
    assert store.first_position() == (second[-1].position, False)


def test_stats_track_fill_and_totals(builder: EventBuilder) -> None:
    store = EventStore(8, memunit=1000)
    txn = builder.transaction(2)
    assert store.try_put(txn)
    store.try_get(1)
    size = sum(e.size for e in txn)
    assert store.stats() == StoreStats(
        items=3,
        bytes=size,
        capacity_items=8,
        capacity_bytes=8000,
        put_count=3,
        get_count=3,
        ack_count=0,
    )
    store.ack(txn[0])
    assert (store.stats().items, store.stats().bytes) == (2, size - txn[0].size)


# ---------------------------------------------------------------------- blocking put


def test_put_waits_for_room_for_all_events(builder: EventBuilder) -> None:
    store = item_store(4)
    assert store.try_put(builder.transaction(1))  # 2 slots used
    third = builder.transaction(2)  # needs 3
    assert not store.try_put(third)
    assert not store.put(third, timeout=0.05)
    assert store.stats().items == 2  # nothing of it went in
    putter = Background(lambda: store.put(third))
    putter.assert_blocked()
    batch = store.try_get(10)
    store.ack(batch.events[-1])
    assert putter.join() is True
    assert store.try_get(10).events == tuple(third)


def test_puts_queue_behind_a_waiting_put(builder: EventBuilder) -> None:
    store = item_store(4)
    first = builder.transaction(2)
    assert store.try_put(first)
    waiting = builder.transaction(2)
    putter = Background(lambda: store.put(waiting))
    putter.assert_blocked()
    # There is a free slot, but taking it would overtake the waiting put.
    assert not store.try_put(builder.transaction(0))
    store.try_get(10)
    store.ack(first[-1])
    assert putter.join() is True
    assert store.try_get(10).events == tuple(waiting)


# ---------------------------------------------------------------------- oversized transactions


def drain(store: EventStore, batch_size: int) -> Iterator[Batch]:
    """Get, check the ack point and ack, batch after batch, until the COMMIT of a transaction."""
    while True:
        batch = store.get(batch_size, timeout=WAIT)
        assert batch.events, "no batch although the producer is waiting for room"
        assert batch.ack_point is not None
        store.ack(batch.ack_point)
        yield batch
        if not batch.partial:
            return


@pytest.mark.parametrize("one_at_a_time", [False, True], ids=["one-list", "event-by-event"])
def test_transaction_three_times_the_store_comes_in_chunks(
    builder: EventBuilder, one_at_a_time: bool
) -> None:
    store = item_store(8)
    txn = builder.transaction(23)  # 24 events, three times the store

    def produce() -> bool:
        if one_at_a_time:
            return all(store.put([event]) for event in txn)
        return store.put(txn)

    producer = Background(produce)
    batches = list(drain(store, 100))
    assert producer.join() is True

    assert [e for b in batches for e in b.events] == txn
    chunks, last = batches[:-1], batches[-1]
    assert chunks
    assert all(b.partial for b in chunks)
    for chunk in chunks:
        assert chunk.first is not None
        assert chunk.last is not None
        assert chunk.first.txn.start == txn[0].txn.start
        resume = chunk.resume_position()
        assert resume is not None
        assert (resume.file, resume.pos) == (txn[0].txn.start.file, txn[0].txn.start.pos)
        assert resume.skip_events == chunk.last.index + 1
        assert resume.gtid_set == txn[0].txn.gtid_set_before
    assert not last.partial
    assert last.ack_point == txn[-1]
    assert last.resume_position() == txn[-1].resume_after()


def test_oversized_transaction_in_memsize_mode(builder: EventBuilder) -> None:
    txn = builder.transaction(20, payload=100)
    store = EventStore(64, memunit=sum(e.size for e in txn) // 3 // 64)  # a third of it
    producer = Background(lambda: store.put(txn))
    batches = list(drain(store, 1))
    assert producer.join() is True
    assert [e for b in batches for e in b.events] == txn
    assert len(batches) >= 3
    assert all(b.partial for b in batches[:-1])


def test_timed_put_of_oversized_list_reports_what_went_in(builder: EventBuilder) -> None:
    store = item_store(4)
    txn = builder.transaction(9)
    with pytest.raises(PartialPutError) as raised:
        store.put(txn, timeout=0.05)
    assert (raised.value.stored, raised.value.total) == (4, 10)
    assert "events[4:]" in str(raised.value)
    batch = store.try_get(10)  # the refused put made the store count as full
    assert batch.partial
    assert batch.events == tuple(txn[:4])
    store.ack(txn[3])
    with pytest.raises(PartialPutError) as raised:
        store.try_put(txn[4:])
    assert raised.value.stored == 4
    assert not store.try_put(txn[8:])


def test_full_store_without_boundary_is_chunked_even_without_waiting_putter(
    builder: EventBuilder,
) -> None:
    store = item_store(4)
    txn = builder.transaction(5)
    assert store.try_put(txn[:3])
    assert store.try_get(10) == Batch(())  # room left: wait for the rest
    assert store.try_put(txn[3:4])
    batch = store.try_get(2)
    assert batch.partial
    assert batch.events == tuple(txn[:2])  # batch_size still bounds a chunk


# ---------------------------------------------------------------------- close


def test_close_wakes_every_blocked_caller(builder: EventBuilder) -> None:
    store = item_store(2)
    assert store.try_put(builder.transaction(0))
    txns = [builder.transaction(1) for _ in range(3)]
    empty = item_store(2)
    waiting = [
        Background[object](lambda: store.put(txns[0])),
        Background[object](lambda: store.put(txns[1])),
        Background[object](lambda: store.put(txns[2], timeout=WAIT * 10)),
        Background[object](lambda: empty.get(1)),
        Background[object](lambda: empty.get(1, timeout=WAIT * 10)),
    ]
    for call in waiting:
        call.assert_blocked()
    store.close()
    empty.close()
    for call in waiting:
        with pytest.raises(StoreClosedError):
            call.join()


@pytest.mark.parametrize(
    "operation",
    [
        lambda s: s.put([]),
        lambda s: s.try_put([]),
        lambda s: s.get(1),
        lambda s: s.try_get(1),
        lambda s: s.ack(("mysql-bin.", 1, 4, 0)),
        lambda s: s.rollback(),
        lambda s: s.first_position(),
    ],
    ids=["put", "try_put", "get", "try_get", "ack", "rollback", "first_position"],
)
def test_operations_after_close_raise(operation: Callable[[EventStore], object]) -> None:
    store = item_store()
    store.close()
    store.close()  # idempotent
    assert store.closed
    with pytest.raises(StoreClosedError, match="closed"):
        operation(store)
    assert isinstance(StoreClosedError(), StoreError)


def test_stats_still_work_after_close(builder: EventBuilder) -> None:
    store = item_store()
    assert store.try_put(builder.transaction(1))
    store.close()
    assert store.stats().items == 2
