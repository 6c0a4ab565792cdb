"""The Lease base behaviour (terms, callbacks, waiting) through the in-memory fake, no sleeps."""

from __future__ import annotations

import pytest

from cdc_platform.errors import LeaseBackendError, LeaseLostError
from cdc_platform.testing.fakes import FakeClock, InMemoryLease, InMemoryLeaseStore

pytestmark = pytest.mark.unit


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def store(clock: FakeClock) -> InMemoryLeaseStore:
    return InMemoryLeaseStore(clock)


def lease(store: InMemoryLeaseStore, address: str, **kwargs: object) -> InMemoryLease:
    return InMemoryLease(store, "shop", address=address, expiry=3.0, renew_interval=0.5, **kwargs)


def test_lost_callback_fires_once_per_term(store: InMemoryLeaseStore, clock: FakeClock) -> None:
    a, b = lease(store, "a"), lease(store, "b")
    seen: list[LeaseLostError] = []
    a.on_lost(seen.append)
    assert a.try_acquire() == 0
    clock.advance(3.0)
    a.tick()
    a.tick()
    assert [e.epoch for e in seen] == [0]
    assert b.try_acquire() == 1
    assert a.try_acquire() is None
    clock.advance(3.0)
    assert a.try_acquire() == 2
    clock.advance(3.0)
    a.tick()
    assert [e.epoch for e in seen] == [0, 2]


def test_taken_over_holder_learns_who_took_it(store: InMemoryLeaseStore, clock: FakeClock) -> None:
    a, b = lease(store, "a"), lease(store, "b")
    seen: list[LeaseLostError] = []
    a.on_lost(seen.append)
    assert a.try_acquire() == 0
    # a is paused: the record expires, b takes over, a resumes before its own deadline check
    clock.advance(3.0)
    assert b.try_acquire() == 1
    a.renew()
    assert seen
    assert "taken over by b at epoch 1" in seen[0].reason


def test_a_failing_callback_does_not_break_the_others(
    store: InMemoryLeaseStore, clock: FakeClock
) -> None:
    a = lease(store, "a")
    seen: list[int | None] = []

    def broken(_: LeaseLostError) -> None:
        raise RuntimeError("callback bug")

    a.on_lost(broken)
    a.on_lost(lambda e: seen.append(e.epoch))
    assert a.try_acquire() == 0
    clock.advance(10.0)
    a.tick()
    assert seen == [0]


def test_wait_held_raises_when_not_held(store: InMemoryLeaseStore) -> None:
    a = lease(store, "a")
    with pytest.raises(LeaseLostError):
        a.wait_held(1.0)
    assert a.try_acquire() == 0
    assert a.wait_held(1.0)


def test_acquire_survives_a_store_outage(store: InMemoryLeaseStore, clock: FakeClock) -> None:
    a = lease(store, "a")
    store.available = False
    assert a.acquire(timeout=2.0) is None, "retries and gives up at the timeout, no exception"
    store.available = True
    assert a.acquire(timeout=2.0) == 0


def test_renewal_failure_is_not_a_loss_until_the_deadline(
    store: InMemoryLeaseStore, clock: FakeClock
) -> None:
    a = lease(store, "a")
    assert a.try_acquire() == 0
    store.available = False
    with pytest.raises(LeaseBackendError):
        a.renew()
    clock.advance(0.5)
    a.tick()
    assert a.is_held()
    store.available = True
    clock.advance(0.5)
    a.tick()
    assert a.is_held()
    clock.advance(2.2)  # t = 3.2: the first deadline (2.25) has passed
    assert a.is_held(), "the last successful renewal (t = 1.0) moved the deadline to 3.25"
    clock.advance(0.1)
    assert not a.is_held()


def test_stop_event_ends_a_waiting_acquire(store: InMemoryLeaseStore, clock: FakeClock) -> None:
    import threading  # noqa: PLC0415 (this test's subject, imported where it is used)

    a, b = lease(store, "a"), lease(store, "b")
    assert a.try_acquire() == 0
    stop = threading.Event()
    stop.set()
    assert b.acquire(stop=stop) is None


def test_members_and_holder(store: InMemoryLeaseStore) -> None:
    a, b = lease(store, "a"), lease(store, "b")
    assert {m.address for m in a.members()} == {"a", "b"}
    assert a.holder() is None
    a.try_acquire()
    holder = b.holder()
    assert holder is not None
    assert holder.address == "a"
    b.close()
    assert {m.address for m in a.members()} == {"a"}
