"""EventStore against a plain-list model: random put / try_get / ack / rollback sequences.

The model is the stream as a list plus three indexes; it predicts every put and every batch,
and the invariants say what the sink relies on: order, no loss, no duplicates, whole
transactions (a batch ends inside a transaction only as a chunk of a full store).
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from cdc_platform.errors import UnknownPositionError
from cdc_platform.events import ChangeEvent, EventKind
from cdc_platform.store import Batch, BatchMode, EventStore, PartialPutError
from cdc_platform.testing.events import EventBuilder

pytestmark = pytest.mark.unit


class StoreModel(RuleBasedStateMachine):
    """Drives one store single-threaded with non-blocking calls and checks it against a list."""

    def __init__(self) -> None:
        super().__init__()
        self.builder = EventBuilder()
        self.pending: list[ChangeEvent] = []
        """Built, not yet stored: the source's read-ahead."""
        self.stream: list[ChangeEvent] = []
        """Everything stored, in order; [acked:got] is handed out, [got:] is not yet."""
        self.acked = 0
        self.got = 0
        self.got_total = 0
        self.starved = False
        self.cuts: set[int] = set()
        """Indexes after which the stream was legitimately cut inside a transaction: the end of
        a chunk, or an ack there (a rollback then restarts get right after it)."""
        self.store = EventStore(2)
        self.slots = 2
        self.mem_limit: int | None = None
        self.memunit = 1
        self.ddl_isolation = False

    @initialize(
        slots_log2=st.integers(0, 4),
        mode=st.sampled_from(BatchMode),
        memunit=st.sampled_from([64, 256, 1024]),
        ddl_isolation=st.booleans(),
    )
    def create(self, slots_log2: int, mode: BatchMode, memunit: int, ddl_isolation: bool) -> None:
        self.slots = 2**slots_log2
        self.memunit = memunit
        self.mem_limit = self.slots * memunit if mode is BatchMode.MEMSIZE else None
        self.ddl_isolation = ddl_isolation
        self.store = EventStore(self.slots, memunit, mode, ddl_isolation)

    # ------------------------------------------------------------------ model helpers

    def measure(self, event: ChangeEvent) -> int:
        return 1 if self.mem_limit is None else event.size

    def unacked_bytes(self) -> int:
        return sum(e.size for e in self.stream[self.acked :])

    def full(self) -> bool:
        return (
            self.starved
            or len(self.stream) - self.acked >= self.slots
            or (self.mem_limit is not None and self.unacked_bytes() >= self.mem_limit)
        )

    def room_for(self, events: list[ChangeEvent]) -> int:
        """How many of ``events`` a non-blocking put stores (see EventStore.put)."""
        free_slots = self.slots - (len(self.stream) - self.acked)
        if self.mem_limit is None:
            fits = min(len(events), free_slots)
            at_once = len(events) <= self.slots
        else:
            free = self.mem_limit - self.unacked_bytes()
            fits = 0
            for event in events[:free_slots]:
                if event.size > free:
                    break
                free -= event.size
                fits += 1
            if fits == 0 and free_slots > 0 and len(self.stream) == self.acked:
                fits = 1
            at_once = len(events) <= self.slots and sum(e.size for e in events) <= self.mem_limit
        if at_once and fits < len(events):
            return 0
        return fits

    def expected_batch(self, batch_size: int) -> tuple[list[ChangeEvent], bool]:
        """The batch try_get must return, spelled out on the list."""
        rest = self.stream[self.got :]
        limit = batch_size * (1 if self.mem_limit is None else self.memunit)
        window: list[ChangeEvent] = []
        used = 0
        for event in rest:
            if used >= limit:
                break
            if self.ddl_isolation and event.kind is EventKind.DDL:
                ends = [i for i, e in enumerate(window) if e.ends_transaction]
                return (window[: ends[-1] + 1] if ends else [*window, event]), False
            window.append(event)
            used += self.measure(event)
        ends = [i for i, e in enumerate(window) if e.ends_transaction]
        if ends:
            return window[: ends[-1] + 1], False
        later = [i for i, e in enumerate(rest) if e.ends_transaction]
        if later:
            return rest[: later[0] + 1], False
        if window and self.full():
            return window, True
        return [], False

    # ------------------------------------------------------------------ rules

    @precondition(lambda self: len(self.pending) < 40)
    @rule(rows=st.integers(0, 6), payload=st.integers(0, 400))
    def read_transaction(self, rows: int, payload: int) -> None:
        self.pending += self.builder.transaction(rows, payload=payload)

    @precondition(lambda self: len(self.pending) < 40)
    @rule()
    def read_ddl(self) -> None:
        self.pending.append(self.builder.ddl())

    @precondition(lambda self: self.pending)
    @rule(count=st.integers(1, 4) | st.integers(1, 40))
    def put(self, count: int) -> None:
        events = self.pending[:count]
        expected = self.room_for(events)
        stored = self.try_put(events)
        assert stored == expected
        if stored < len(events):
            self.starved = True
        self.stream += events[:stored]
        del self.pending[:stored]

    def try_put(self, events: list[ChangeEvent]) -> int:
        """How many of ``events`` the store took: all, none or (a list too large for it) some."""
        try:
            return len(events) if self.store.try_put(events) else 0
        except PartialPutError as exc:
            error = exc
        assert error.total == len(events)
        assert 0 < error.stored < len(events)
        return error.stored

    @rule(batch_size=st.integers(1, 20))
    def get(self, batch_size: int) -> None:
        start = self.got
        batch = self.store.try_get(batch_size)
        expected, partial = self.expected_batch(batch_size)
        assert batch == Batch(tuple(expected), partial=partial)

        # What the sink relies on, said directly (implied by the equality above).
        assert list(batch.events) == self.stream[start : start + len(batch.events)]
        if batch.events:
            assert batch.ack_point == batch.events[-1]
            boundaries = [e for e in batch.events if e.ends_transaction]
            if batch.partial:
                assert not boundaries
                assert self.full()
            else:
                assert batch.events[-1].ends_transaction
            if start > 0 and not self.stream[start - 1].ends_transaction:
                assert start - 1 in self.cuts, "batch starts inside a transaction"
            if self.ddl_isolation and any(e.kind is EventKind.DDL for e in batch.events):
                assert len(batch.events) == 1
        else:
            nothing_whole = not any(e.ends_transaction for e in self.stream[start:])
            assert start == len(self.stream) or (nothing_whole and not self.full())

        self.got += len(batch.events)
        self.got_total += len(batch.events)
        if batch.partial:
            self.cuts.add(self.got - 1)

    @precondition(lambda self: self.got > self.acked)
    @rule(data=st.data(), by_key=st.booleans())
    def ack(self, data: st.DataObject, by_key: bool) -> None:
        index = data.draw(st.integers(self.acked, self.got - 1))
        event = self.stream[index]
        self.store.ack(event.sort_key() if by_key else event)
        self.acked = index + 1
        self.starved = False
        self.cuts.add(index)

    @rule(data=st.data())
    def ack_unknown(self, data: st.DataObject) -> None:
        outside = self.stream[: self.acked] + self.stream[self.got :] + self.pending
        if not outside:
            return
        event = data.draw(st.sampled_from(outside))
        with pytest.raises(UnknownPositionError):
            self.store.ack(event)

    @rule()
    def rollback(self) -> None:
        self.store.rollback()
        self.got = self.acked

    # ------------------------------------------------------------------ invariants

    @invariant()
    def stats_match(self) -> None:
        stats = self.store.stats()
        assert stats.items == len(self.stream) - self.acked
        assert stats.bytes == self.unacked_bytes()
        assert stats.put_count == len(self.stream)
        assert stats.get_count == self.got_total
        assert stats.ack_count == self.acked
        assert stats.items <= stats.capacity_items
        if stats.capacity_bytes is not None and stats.items > 1:
            assert stats.bytes <= stats.capacity_bytes

    @invariant()
    def first_position_matches(self) -> None:
        first = self.store.first_position()
        if self.acked:
            assert first == (self.stream[self.acked - 1].position, False)
        elif self.stream:
            assert first == (self.stream[0].position, True)
        else:
            assert first is None


StoreModel.TestCase.settings = settings(
    max_examples=300,
    stateful_step_count=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestStoreModel = StoreModel.TestCase
