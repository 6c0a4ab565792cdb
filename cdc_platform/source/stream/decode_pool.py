"""Parallel decoding of rows events in worker processes, reassembled in binlog order.

One binlog stream is read by one thread; the rows events it frames (:mod:`.rows_framing`)
are decoded by :class:`DecodePool`'s worker processes (row values to JSON images, the
pure-Python work that dominates the reader's profile), and :func:`ordered_events` feeds the
results to the :class:`~cdc_platform.source.stream.transactions.TransactionAssembler` in the order
the events were read, so transaction boundaries, indices, ``seq`` order and the restart
positions are those of the in-thread path. The rows in flight are bounded in bytes. What a
worker process imports and runs is :mod:`.decode_worker`.
"""

from __future__ import annotations

import itertools
import multiprocessing
import pickle
import threading
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any

from pymysqlreplication.event import GtidEvent, MariadbGtidEvent, XidEvent
from pymysqlreplication.row_event import TableMapEvent

from cdc_platform.events import ChangeEvent
from cdc_platform.source.mysql_errors import StreamLostError
from cdc_platform.source.stream.decode_worker import (
    MAX_DECODERS,
    Decoded,
    decode_frame,
    decode_in_worker,
    worker_ready,
)
from cdc_platform.source.stream.rows_framing import RowsFrame
from cdc_platform.source.stream.transactions import TransactionAssembler
from cdc_platform.source.values import RowDecoder

__all__ = [
    "DEFAULT_BATCH_BYTES",
    "DEFAULT_INLINE_BYTES",
    "DEFAULT_IN_FLIGHT_BYTES",
    "PROCESS_WORKERS",
    "DecodePool",
    "StreamHooks",
    "decode_frame",
    "ordered_events",
]

DEFAULT_IN_FLIGHT_BYTES = 8 << 20
"""Row bytes sent to the workers and not yet fed to the assembler, at most (beyond one
event bigger than that on its own)."""

DEFAULT_BATCH_BYTES = 256 << 10
"""Row bytes sent to a worker in one task (fewer, larger messages between processes)."""

DEFAULT_INLINE_BYTES = 1 << 10
"""Rows events with fewer row bytes are decoded in the reader thread: for a single-row event
of a narrow table (about 100 bytes) the reader's share of sending it to a worker (pickling
the frame, unpickling the images, the task) costs about as much as decoding it, and the
worker takes a core from the reader and the Delta commits. A row of a wide table (over
1 KiB) costs ten times as much to decode and still goes to a worker."""


class _ProcessWorkers:
    """The decode worker processes of this process: one pool that every binlog source in it
    shares (``serve`` runs many destinations in one process, and ``auto`` per destination
    would multiply the processes: 40 destinations, 320 workers). The first source to need
    workers starts the pool with its own figure; later ones use it as it is. A pool that broke
    (a worker killed) is replaced for the sources that start after; the ones that saw it break
    end as before, and it stops once its last user left."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._current: ProcessPoolExecutor | None = None
        self._users: dict[ProcessPoolExecutor, int] = {}

    def acquire(self, workers: int) -> ProcessPoolExecutor:
        with self._lock:
            executor = self._current
            if executor is None or _broken(executor):
                context = multiprocessing.get_context("forkserver")
                # The fork server imports only the worker's module (not the parent's
                # ``__main__``, the default), so each worker holds what decoding needs.
                context.set_forkserver_preload([decode_in_worker.__module__])
                executor = ProcessPoolExecutor(workers, mp_context=context)
                for _ in range(workers):
                    executor.submit(worker_ready)
                self._current = executor
            self._users[executor] = self._users.get(executor, 0) + 1
            return executor

    def release(self, executor: ProcessPoolExecutor) -> None:
        with self._lock:
            left = self._users.get(executor, 1) - 1
            if left > 0:
                self._users[executor] = left
                return
            self._users.pop(executor, None)
            if self._current is executor:
                self._current = None
        executor.shutdown(wait=True, cancel_futures=True)

    def processes(self) -> int:
        """Worker processes running now (of every pool still in use)."""
        with self._lock:
            return sum(len(getattr(e, "_processes", None) or ()) for e in self._users)


def _broken(executor: ProcessPoolExecutor) -> bool:
    return bool(getattr(executor, "_broken", False))


@dataclass(frozen=True)
class WorkerPool:
    """A look at one pool of decode worker processes, also after its sources left it."""

    executor: ProcessPoolExecutor

    def pids(self) -> list[int]:
        """Pids of its worker processes (none once it stopped)."""
        return list(getattr(self.executor, "_processes", None) or ())

    def in_flight(self) -> int:
        """Batches sent to its workers and not decoded yet."""
        return len(getattr(self.executor, "_pending_work_items", None) or ())

    def broken(self) -> bool:
        """Whether it broke (a worker died): the runs that use it end."""
        return _broken(self.executor)


PROCESS_WORKERS = _ProcessWorkers()
"""The one decode worker pool of this process."""

_KEYS = itertools.count(1)
"""Decoder keys, unique in the process: the workers are shared by every source."""


class DecodePool:
    """One binlog source's use of the process's decode workers (:data:`PROCESS_WORKERS`,
    started with ``workers`` processes by the first source that needs them): rows events in
    batches of up to ``batch_bytes`` row bytes; at most ``max_in_flight_bytes`` row bytes are
    sent and not yet fed back. Events of fewer than ``inline_bytes`` row bytes are decoded in
    the reader thread, in their place.

    Workers are started with ``forkserver`` (never a fork of the multi-threaded reader
    process) by :meth:`start`, or at the first :meth:`submit`: a stream of small events only
    (decoded in the reader thread) never starts them, nor pays their memory and start-up.
    """

    def __init__(
        self,
        workers: int,
        *,
        max_in_flight_bytes: int = DEFAULT_IN_FLIGHT_BYTES,
        batch_bytes: int = DEFAULT_BATCH_BYTES,
        inline_bytes: int = DEFAULT_INLINE_BYTES,
    ) -> None:
        self.workers = workers
        self.max_in_flight_bytes = max_in_flight_bytes
        self.batch_bytes = batch_bytes
        self.inline_bytes = inline_bytes
        self._executor: ProcessPoolExecutor | None = None
        self._keys: dict[int, tuple[int, bytes, RowDecoder]] = {}

    def start(self) -> None:
        """Join the process's workers now (they take a moment to import), not at the first
        rows."""
        if self._executor is None:
            self._executor = PROCESS_WORKERS.acquire(self.workers)

    def key(self, decoder: RowDecoder) -> tuple[int, bytes]:
        """The key workers know ``decoder`` by, and its pickled definition."""
        known = self._keys.get(id(decoder))
        if known is None or known[2] is not decoder:
            if len(self._keys) >= MAX_DECODERS:
                self._keys.clear()
            # The decoder stays referenced here, so its id is not reused while keyed.
            known = (next(_KEYS), pickle.dumps(decoder), decoder)
            self._keys[id(decoder)] = known
        return known[0], known[1]

    def submit(
        self, specs: dict[int, bytes], batch: list[tuple[int, RowsFrame]]
    ) -> Future[list[Decoded]]:
        """Decode a batch of rows events (each with its decoder's key) in a worker."""
        self.start()
        assert self._executor is not None
        return self._executor.submit(decode_in_worker, specs, batch)

    def worker_pool(self) -> WorkerPool | None:
        """The pool of worker processes this source uses now (None before :meth:`start`)."""
        return None if self._executor is None else WorkerPool(self._executor)

    def close(self) -> None:
        """Leave the workers (the last source to leave stops them, pending work cancelled)."""
        executor, self._executor = self._executor, None
        self._keys.clear()
        if executor is not None:
            PROCESS_WORKERS.release(executor)


@dataclass(frozen=True)
class StreamHooks:
    """What :func:`ordered_events` needs from the reader.

    ``fetch`` returns the next event (blocking; None when the server ended the stream);
    ``stop`` ends the loop; ``on_event`` is called after each event read; ``more_waiting``
    says whether more of the stream has already arrived (so waiting for the workers can be
    put off without delaying anything).
    """

    fetch: Callable[[], Any]
    stop: threading.Event
    on_event: Callable[[], None] = lambda: None
    more_waiting: Callable[[], bool] = lambda: False


_QUEUED = (XidEvent, MariadbGtidEvent, GtidEvent)
"""Transaction boundaries that wait in line behind the rows events in flight; they neither
read nor change the table maps. Every other event is fed after all before it."""

_MAX_QUEUED_EVENTS = 100_000


def ordered_events(
    stream: StreamHooks, assembler: TransactionAssembler, pool: DecodePool
) -> Iterator[list[ChangeEvent]]:
    """Change events of the stream's events, rows decoded by ``pool``, in binlog order (in
    the non-empty lists the assembler gives).

    Rows events are batched to the workers, but those smaller than ``pool.inline_bytes`` are
    decoded in this thread (at once, or when their turn comes if events are in line before
    them); a GTID or commit event queues behind them, so the workers decode while the next
    transactions are read. Table maps are applied to the plans at once (the rows events
    after them are decoded with them; those before keep the decoder they were given). Any
    other event (rotation, DDL and other statements, XA, heartbeats) is fed only after
    everything before it, and whenever nothing more of the stream has arrived, everything
    decoded so far is fed: an idle stream delays nothing.

    Ends when ``stop`` is set; raises StreamLostError when ``fetch`` returns None. Rows events
    still in flight then are never fed: the source restarts from the last boundary the
    assembler passed.
    """
    line = _InOrder(assembler, pool)
    window, inline = line.window, pool.inline_bytes
    fetch, stop = stream.fetch, stream.stop
    while not stop.is_set():
        event = fetch()
        if event is None:
            raise StreamLostError("the server ended the binlog stream")
        stream.on_event()
        kind = type(event)
        if kind is TableMapEvent:
            assembler.feed(event)  # plans only; no change event, no transaction state
        elif kind is RowsFrame and (window or line.batch or len(event.rows) >= inline):
            decoder = assembler.decoder_of(event)
            if decoder is not None:  # else a table the filters leave out: never decoded
                line.add(decoder, event)
        else:  # a small rows event or any other event with nothing in line: fed now
            line.send()
            if not window:
                out = assembler.feed(event)
                if out:
                    yield out
            elif kind in _QUEUED:
                window.append(_Entry(event, None, [], 0))
            else:
                yield from line.feed_ready(block=True)
                out = assembler.feed(event)
                if out:
                    yield out
        if window:
            yield from line.feed_ready(block=line.crowded() or not stream.more_waiting())


class _InOrder:
    """The rows events sent to the workers, the small ones left to this thread and the events
    queued behind them, in order."""

    def __init__(self, assembler: TransactionAssembler, pool: DecodePool) -> None:
        self.window: deque[_Entry] = deque()
        self._assembler = assembler
        self._pool = pool
        self._in_flight = 0
        self.batch: list[tuple[RowDecoder, RowsFrame]] = []
        """The rows events gathered for the next task, not sent yet."""
        self._specs: dict[int, bytes] = {}
        self._keys: list[int] = []
        self._batched = 0

    def add(self, decoder: RowDecoder, frame: RowsFrame) -> None:
        """A rows event for the next batch (sent once the batch is big enough) or, if small,
        to decode here in its turn (its bytes count as in flight until it is fed)."""
        size = len(frame.rows)
        if size < self._pool.inline_bytes:
            self.send()
            self.window.append(_Entry(None, None, [(decoder, frame)], size))
            self._in_flight += size
            return
        key, spec = self._pool.key(decoder)
        self._specs[key] = spec
        self._keys.append(key)
        self.batch.append((decoder, frame))
        self._batched += size
        if self._batched >= self._pool.batch_bytes:
            self.send()

    def send(self) -> None:
        """Send the batch being gathered to a worker."""
        if not self.batch:
            return
        frames = [frame for _, frame in self.batch]
        future = self._pool.submit(self._specs, list(zip(self._keys, frames, strict=True)))
        self.window.append(_Entry(None, future, self.batch, self._batched))
        self._in_flight += self._batched
        self.batch, self._specs, self._keys, self._batched = [], {}, [], 0

    def crowded(self) -> bool:
        """Too much in flight: wait for the workers before reading on."""
        return (
            self._in_flight > self._pool.max_in_flight_bytes
            or len(self.window) > _MAX_QUEUED_EVENTS
        )

    def feed_ready(self, *, block: bool) -> Iterator[list[ChangeEvent]]:
        """Feed the assembler from the head of the line: everything (``block``), or as far
        as the workers are done."""
        window, assembler = self.window, self._assembler
        while window:
            head = window[0]
            if head.future is None:
                window.popleft()
                if head.event is not None:
                    out = assembler.feed(head.event)
                else:  # a small rows event, decoded here
                    self._in_flight -= head.size
                    decoder, frame = head.frames[0]
                    out = assembler.feed_decoded(frame, decoder, decode_frame(decoder, frame))
                if out:
                    yield out
                continue
            if not block and not head.future.done():
                return
            window.popleft()
            self._in_flight -= head.size
            for (decoder, frame), decoded in zip(head.frames, head.future.result(), strict=True):
                out = assembler.feed_decoded(frame, decoder, decoded)
                if out:
                    yield out


@dataclass(frozen=True, slots=True)
class _Entry:
    """In line for the assembler: a queued event (``event``), a batch of rows events being
    decoded (``future``), or one small rows event to decode in this thread (neither)."""

    event: Any
    future: Future[list[Decoded]] | None
    frames: list[tuple[RowDecoder, RowsFrame]]
    size: int
