"""A commit's batch gathered from several gets of a store smaller than a batch."""

from __future__ import annotations

import threading

import pytest

from cdc_platform.config.batch_mode import BatchMode
from cdc_platform.config.instance import StoreConfig
from cdc_platform.runtime.batch_gathering import gather_batch
from cdc_platform.store import EventStore
from cdc_platform.testing.events import EventBuilder

pytestmark = pytest.mark.unit

WAIT = 10.0
"""Generous bound for something that must happen; tests never assert durations."""


def small_store() -> tuple[EventStore, StoreConfig]:
    """A store of 8 events and a batch of 32: what a small destination has in proportion."""
    settings = StoreConfig(
        buffer_size=8, batch_mode=BatchMode.ITEMSIZE, batch_size=32, batch_timeout_seconds=30
    )
    store = EventStore(settings.buffer_size, batch_mode=settings.batch_mode)
    return store, settings


def test_the_batch_gathers_what_the_reader_puts_while_it_is_taken() -> None:
    store, settings = small_store()
    build = EventBuilder()
    transactions = [build.transaction(rows=3) for _ in range(8)]  # 4 events each, 32 in all
    everything = [event for txn in transactions for event in txn]
    reader = threading.Thread(target=store.put, args=(everything,), kwargs={"timeout": WAIT})
    reader.start()
    first = store.get(settings.batch_size, timeout=WAIT)
    # The store holds 8 events: without gathering a commit would carry 2 transactions.
    assert len(first.events) == 8
    batch = gather_batch(store, first, settings)
    reader.join(WAIT)
    assert list(batch.events) == everything  # in order, nothing twice, nothing left out
    assert batch.ack_point is everything[-1]
    assert batch.arrived == first.arrived
    assert store.stats().items == 0  # freed: the rows are the committer's now


def test_an_old_batch_is_not_held_back_for_more() -> None:
    store, settings = small_store()
    build = EventBuilder()
    store.put(build.transaction(rows=3), timeout=WAIT)
    first = store.get(settings.batch_size, timeout=0)
    now = first.arrived + settings.batch_timeout_seconds  # it has waited its batch timeout
    later = build.transaction(rows=3)
    store.put(later, timeout=WAIT)
    batch = gather_batch(store, first, settings, clock=lambda: now)
    assert batch is first
    assert store.stats().items == len(later)  # the next transaction waits for the next commit


def test_a_full_batch_and_ddl_isolation_take_nothing_more() -> None:
    build = EventBuilder()
    for settings in (
        StoreConfig(buffer_size=8, batch_mode=BatchMode.ITEMSIZE, batch_size=4),
        StoreConfig(
            buffer_size=8, batch_mode=BatchMode.ITEMSIZE, batch_size=32, ddl_isolation=True
        ),
    ):
        store = EventStore(settings.buffer_size, batch_mode=settings.batch_mode)
        store.put(build.transaction(rows=3), timeout=WAIT)
        first = store.get(settings.batch_size, timeout=0)
        store.put(build.transaction(rows=3), timeout=WAIT)
        assert gather_batch(store, first, settings) is first
        assert store.stats().items == 4


def test_bytes_count_in_memsize_mode() -> None:
    build = EventBuilder()
    events = [event for _ in range(6) for event in build.transaction(rows=1, payload=400)]
    one = events[0].size + events[1].size  # a transaction: its row and its COMMIT
    settings = StoreConfig(buffer_size=16, memunit=one, batch_size=3, batch_timeout_seconds=30)
    store = EventStore(16, memunit=one, batch_mode=BatchMode.MEMSIZE)
    store.put(events, timeout=WAIT)
    first = store.get(1, timeout=0)
    assert len(first.events) == 2
    batch = gather_batch(store, first, settings)
    assert list(batch.events) == events[:6]  # three transactions' worth of bytes
    assert store.stats().items == 6
