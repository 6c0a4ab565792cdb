"""The in-memory event store between source and sink (Canal's MemoryEventStoreWithBuffer).

A power-of-two ring of slots addressed by three ever-increasing sequences, as in Canal:

* ``put``: number of events ever stored; the next one goes to slot ``put & mask``;
* ``get``: number of events handed out by ``get`` (reset to ``ack`` by ``rollback``);
* ``ack``: number of events acknowledged and freed.

``ack <= get <= put`` always holds; ``put - ack`` slots are in use. Byte totals are kept the same
way (``put_mem``, ``get_mem``, ``ack_mem``) from :attr:`ChangeEvent.size`, the real size of each
event, so in MEMSIZE mode the store holds at most ``buffer_size * memunit`` bytes (Canal only
checks the total before a put and may overshoot by a whole transaction).

Where this store differs from Canal, on purpose:

* Batches are whole transactions: a batch ends at its last transaction boundary and the trailing
  partial transaction waits for the next get; a transaction larger than the batch size comes
  back whole once complete.
* A transaction larger than the store does not deadlock. When the store is full and its un-got
  part holds no transaction boundary, ``get`` hands out a chunk of that transaction
  (``Batch.partial``); acking the chunk's last event resumes inside the transaction
  (:meth:`ChangeEvent.resume_after`). A list of events larger than the store is put in pieces.
* Waiters are woken with ``notify_all``, so putters and getters needing different amounts never
  miss a wake-up; a put waiting for room holds back later puts, so lists never interleave.
* A blocking get whose batch size exceeds what the store can hold returns once the store is full
  instead of waiting for its timeout.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import cast

from cdc_platform.config.batch_mode import BatchMode
from cdc_platform.errors import StoreError, UnknownPositionError
from cdc_platform.events import BinlogPosition, ChangeEvent, EventKind
from cdc_platform.store.batch import (
    Batch,
    EventKey,
    PartialPutError,
    StoreClosedError,
    StoreStats,
)

__all__ = ["EventStore"]


class EventStore:
    """Thread-safe bounded store of change events: put / get / ack / rollback.

    One producer (the binlog source) puts, one consumer (the sink) gets, commits and acks;
    any number of threads may call in, every blocking call waits on a condition (never polls)
    and :meth:`close` wakes them all.
    """

    def __init__(
        self,
        buffer_size: int,
        memunit: int = 1024,
        batch_mode: BatchMode = BatchMode.MEMSIZE,
        ddl_isolation: bool = False,
    ) -> None:
        if buffer_size < 1 or buffer_size & (buffer_size - 1):
            raise StoreError(f"buffer_size must be a power of two, got {buffer_size}")
        if memunit < 1:
            raise StoreError(f"memunit must be at least 1 byte, got {memunit}")
        self._size = buffer_size
        self._mask = buffer_size - 1
        self._memunit = memunit
        self._memsize = batch_mode is BatchMode.MEMSIZE
        self._mem_limit = buffer_size * memunit
        self._ddl_isolation = ddl_isolation
        self._entries: list[ChangeEvent | None] = [None] * buffer_size
        self._arrived: list[float] = [0.0] * buffer_size
        """When each slot's event was put (monotonic), for :meth:`get`'s ``max_age``."""
        self._put = 0
        self._get = 0
        self._ack = 0
        self._put_mem = 0
        self._get_mem = 0
        self._ack_mem = 0
        self._got_total = 0
        self._last_boundary = -1
        """Sequence of the newest transaction boundary stored, so readiness checks are O(1)."""
        self._last_ddl = -1
        self._last_acked: ChangeEvent | None = None
        self._starved = False
        """A put found no room since the last ack: a getter must not wait for more events."""
        self._putting = False
        """A put is waiting for room; later puts queue behind it so lists never interleave."""
        self._closed = False
        self._lock = threading.Lock()
        self._room = threading.Condition(self._lock)
        self._data = threading.Condition(self._lock)

    # ------------------------------------------------------------------ put

    def put(self, events: Sequence[ChangeEvent], timeout: float | None = None) -> bool:
        """Store all ``events`` in order, waiting for room; False if ``timeout`` expires first.

        A list that fits in the store goes in at once, when there is room for all of it (as in
        Canal, so a transaction put as one list is never half-visible). A list that can never
        fit (more events than slots, or more bytes than the MEMSIZE limit) goes in piece by
        piece as acks free room; if the timeout expires after some pieces went in, this raises
        :class:`PartialPutError` saying how many. An event larger than the whole byte limit is
        stored alone into an empty store.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            return self._put_until(events, deadline)

    def try_put(self, events: Sequence[ChangeEvent]) -> bool:
        """Store all ``events`` if there is room now, else False: ``put(events, timeout=0)``."""
        return self.put(events, timeout=0)

    def _put_until(self, events: Sequence[ChangeEvent], deadline: float | None) -> bool:
        self._check_open()
        total = len(events)
        if not total:
            return True
        at_once = total <= self._size and (
            not self._memsize or sum(e.size for e in events) <= self._mem_limit
        )
        stored = 0
        queued = False
        try:
            while True:
                if queued or not self._putting:
                    count = self._room_for(events, stored)
                    if at_once and count < total:
                        count = 0
                    if count:
                        self._store(events, stored, stored + count)
                        stored += count
                        if stored == total:
                            return True
                        continue
                    self._starved = True
                    self._data.notify_all()
                    self._putting = queued = True
                if not self._wait(self._room, deadline):
                    if stored:
                        raise PartialPutError(stored, total)
                    return False
        finally:
            if queued:
                self._putting = False
                self._room.notify_all()

    def _room_for(self, events: Sequence[ChangeEvent], start: int) -> int:
        """How many of ``events[start:]`` fit now, as a prefix."""
        count = min(len(events) - start, self._size - (self._put - self._ack))
        if not self._memsize:
            return count
        free = self._mem_limit - (self._put_mem - self._ack_mem)
        fits = 0
        while fits < count and events[start + fits].size <= free:
            free -= events[start + fits].size
            fits += 1
        if fits == 0 and count and self._put == self._ack:
            return 1
        return fits

    def _store(self, events: Sequence[ChangeEvent], start: int, end: int) -> None:
        now = time.monotonic()
        for i in range(start, end):
            event = events[i]
            seq = self._put
            self._entries[seq & self._mask] = event
            self._arrived[seq & self._mask] = now
            self._put_mem += event.size
            if event.ends_transaction:
                self._last_boundary = seq
            if event.kind is EventKind.DDL:
                self._last_ddl = seq
            self._put = seq + 1
        self._data.notify_all()

    # ------------------------------------------------------------------ get

    def get(
        self, batch_size: int, timeout: float | None = None, *, max_age: float | None = None
    ) -> Batch:
        """The next batch, waiting until a full one is ready or ``timeout`` expires, or (with
        ``max_age``) until the oldest event not handed out yet has been in the store that long.

        ``max_age`` bounds how long an event waits for its batch wherever the wait began: a
        consumer that comes back late (after a slow commit or maintenance) gets the whole
        transactions there are at once instead of waiting ``timeout`` more for a fuller batch.

        Ready means ``batch_size`` events (ITEMSIZE) or ``batch_size * memunit`` bytes (MEMSIZE)
        are available and a transaction boundary among them, or the batch cannot grow any more
        (a DDL cut it under ``ddl_isolation``; the store is full). When the timeout expires,
        returns the whole transactions there are, possibly none.

        The batch is the available events up to the last boundary within the first
        ``batch_size`` worth of them; without a boundary there, up to the first boundary after
        (a transaction is never split for being large); without any boundary, a ``partial``
        chunk of ``batch_size`` worth when the store is full (a put found no room since the
        last ack, or slots or bytes are used up), else nothing. Under ``ddl_isolation`` a DDL
        comes back alone: the batch before it stops right before it (rows the source left
        without a COMMIT right before a DDL count as its transaction and come back with it).
        """
        if batch_size < 1:
            raise StoreError(f"batch_size must be at least 1, got {batch_size}")
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            self._check_open()
            while not self._ready(batch_size) and self._wait(
                self._data, self._until(deadline, max_age)
            ):
                pass
            return self._take(batch_size)

    def _until(self, deadline: float | None, max_age: float | None) -> float | None:
        """The earlier of ``deadline`` and the moment the oldest un-got event is ``max_age``
        old; only ``deadline`` while no whole transaction waits (the part of one there is
        cannot be handed out, so an age reached would only spin the consumer)."""
        if max_age is None or self._last_boundary < self._get:
            return deadline
        due = self._arrived[self._get & self._mask] + max_age
        return due if deadline is None else min(deadline, due)

    def try_get(self, batch_size: int) -> Batch:
        """The whole transactions available now, never waiting: ``get(batch_size, timeout=0)``."""
        return self.get(batch_size, timeout=0)

    def _window_limit(self, batch_size: int) -> int:
        return batch_size * self._memunit if self._memsize else batch_size

    def _full(self) -> bool:
        return (
            self._starved
            or self._put - self._ack >= self._size
            or (self._memsize and self._put_mem - self._ack_mem >= self._mem_limit)
        )

    def _ready(self, batch_size: int) -> bool:
        """Whether :meth:`_take` would return a batch that more puts cannot change; O(1)."""
        if self._put == self._get:
            return False
        if self._full():
            return True
        if self._ddl_isolation and self._last_ddl >= self._get:
            return True
        if self._last_boundary < self._get:
            return False
        available = self._put_mem - self._get_mem if self._memsize else self._put - self._get
        return available >= self._window_limit(batch_size)

    def _take(self, batch_size: int) -> Batch:
        start = self._get
        bounds = self._batch_end(start, self._window_limit(batch_size))
        if bounds is None:
            return Batch(())
        end, partial = bounds
        batch = Batch(
            tuple(self._at(seq) for seq in range(start, end)),
            partial=partial,
            arrived=self._arrived[start & self._mask],
        )
        self._get = end
        self._get_mem += batch.size_bytes
        self._got_total += len(batch.events)
        return batch

    def _batch_end(self, start: int, limit: int) -> tuple[int, bool] | None:
        """End sequence (exclusive) of the batch starting at ``start`` and whether it is partial."""
        put = self._put
        used = 0
        last_boundary = start - 1
        seq = start
        while seq < put and used < limit:
            event = self._at(seq)
            if self._ddl_isolation and event.kind is EventKind.DDL:
                # Stop before the DDL, or end with it when the rows before it are its own.
                return (last_boundary + 1 if last_boundary >= start else seq + 1, False)
            used += event.size if self._memsize else 1
            if event.ends_transaction:
                last_boundary = seq
            seq += 1
        if last_boundary >= start:
            return (last_boundary + 1, False)
        if self._last_boundary >= start:
            while not self._at(seq).ends_transaction:
                seq += 1
            return (seq + 1, False)
        if seq > start and self._full():
            return (seq, True)
        return None

    # ------------------------------------------------------------------ ack / rollback

    def ack(self, event: ChangeEvent | EventKey) -> None:
        """Free every event up to and including ``event`` (matched by its sort key).

        It must have been handed out by get and not acked since (nor rolled back).
        """
        key = event.sort_key() if isinstance(event, ChangeEvent) else event
        with self._lock:
            self._check_open()
            # Newest first: the ack point is almost always the last event handed out.
            for seq in range(self._get - 1, self._ack - 1, -1):
                if self._at(seq).sort_key() == key:
                    break
            else:
                raise UnknownPositionError(
                    f"cannot ack event {key}: it is not among the {self._get - self._ack} "
                    "events handed out by get and not yet acked"
                )
            self._last_acked = self._at(seq)
            freed = 0
            for s in range(self._ack, seq + 1):
                freed += self._at(s).size
                self._entries[s & self._mask] = None
            self._ack = seq + 1
            self._ack_mem += freed
            self._starved = False
            self._room.notify_all()

    def rollback(self) -> None:
        """Make every event handed out and not acked available to get again, in order."""
        with self._lock:
            self._check_open()
            self._get = self._ack
            self._get_mem = self._ack_mem
            self._data.notify_all()

    # ------------------------------------------------------------------ state

    def first_position(self) -> tuple[BinlogPosition, bool] | None:
        """Canal's getFirstPosition: where a consumer without a saved position starts.

        ``(position, True)``: nothing was acked yet, start at (including) the first stored
        event. ``(position, False)``: start after the last acked event. None when the store
        has never held anything.
        """
        with self._lock:
            self._check_open()
            if self._last_acked is not None:
                return (self._last_acked.position, False)
            if self._put > self._ack:
                return (self._at(self._ack).position, True)
            return None

    def stats(self) -> StoreStats:
        """Fill and totals; works after :meth:`close` too, so metrics never race shutdown."""
        with self._lock:
            return StoreStats(
                items=self._put - self._ack,
                bytes=self._put_mem - self._ack_mem,
                capacity_items=self._size,
                capacity_bytes=self._mem_limit if self._memsize else None,
                put_count=self._put,
                get_count=self._got_total,
                ack_count=self._ack,
            )

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    def close(self) -> None:
        """Wake every blocked caller with :class:`StoreClosedError`; later calls raise it too."""
        with self._lock:
            self._closed = True
            self._room.notify_all()
            self._data.notify_all()

    # ------------------------------------------------------------------ helpers

    def _at(self, seq: int) -> ChangeEvent:
        # Slots between ack and put always hold an event; only acked slots are None.
        return cast(ChangeEvent, self._entries[seq & self._mask])

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosedError

    def _wait(self, condition: threading.Condition, deadline: float | None) -> bool:
        """Wait once for a notify; False when the deadline has passed. Raises once closed."""
        if deadline is None:
            condition.wait()
        else:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            condition.wait(remaining)
        self._check_open()
        return True
