"""Parallel decoding of rows events in worker processes, reassembled in binlog order.

One binlog stream is read by one thread; the rows events it frames (:mod:`.rows_framing`)
are decoded by :class:`DecodePool`'s worker processes (row values to JSON images, the
pure-Python work that dominates the reader's profile), and :func:`ordered_events` feeds the
results to the :class:`~cdc_platform.source.transactions.TransactionAssembler` in the order
the events were read. Every other event waits until all rows events before it are fed, so
transaction boundaries, indices, ``seq`` order and the restart positions are those of the
in-thread path. The rows in flight are bounded in bytes.
"""

from __future__ import annotations

import multiprocessing
import pickle
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from threading import Event
from typing import Any

from cdc_platform.events import ChangeEvent
from cdc_platform.source.mysql import StreamLostError
from cdc_platform.source.rows_framing import UPDATE, RowsFrame
from cdc_platform.source.transactions import TransactionAssembler
from cdc_platform.source.values import RowDecoder

__all__ = [
    "DEFAULT_BATCH_BYTES",
    "DEFAULT_IN_FLIGHT_BYTES",
    "DecodePool",
    "decode_frame",
    "ordered_events",
]

DEFAULT_IN_FLIGHT_BYTES = 8 << 20
"""Row bytes sent to the workers and not yet fed to the assembler, at most (beyond one
event bigger than that on its own)."""

DEFAULT_BATCH_BYTES = 256 << 10
"""Row bytes sent to a worker in one task (fewer, larger messages between processes)."""

Decoded = list[tuple[str, str]] | list[tuple[str, str, str]]


def decode_frame(decoder: RowDecoder, frame: RowsFrame) -> Decoded:
    """The JSON images of one rows event: (image, pk) per row, (before, after, pk) for
    updates."""
    if frame.kind == UPDATE:
        return decoder.updates(frame.rows, frame.present, frame.present_after)
    return decoder.images(frame.rows, frame.present)


_worker_decoders: dict[int, RowDecoder] = {}
"""Each worker's decoders, by the key the pool gave the table version."""


def _decode_in_worker(specs: dict[int, bytes], batch: list[tuple[int, RowsFrame]]) -> list[Decoded]:
    out: list[Decoded] = []
    for key, frame in batch:
        decoder = _worker_decoders.get(key)
        if decoder is None:
            decoder = pickle.loads(specs[key])  # noqa: S301 -- our own pickle, from the parent
            _worker_decoders[key] = decoder
        out.append(decode_frame(decoder, frame))
    return out


def _ready() -> None:
    """A first task: the worker has started and imported the decoders."""


class DecodePool:
    """``workers`` processes decoding rows events, in batches of up to ``batch_bytes`` row
    bytes; at most ``max_in_flight_bytes`` row bytes are sent and not yet fed back.

    Workers are started with ``forkserver`` (never a fork of the multi-threaded reader
    process) by :meth:`start`, or at the first :meth:`submit`.
    """

    def __init__(
        self,
        workers: int,
        *,
        max_in_flight_bytes: int = DEFAULT_IN_FLIGHT_BYTES,
        batch_bytes: int = DEFAULT_BATCH_BYTES,
    ) -> None:
        self.workers = workers
        self.max_in_flight_bytes = max_in_flight_bytes
        self.batch_bytes = batch_bytes
        self._executor: ProcessPoolExecutor | None = None
        self._keys: dict[int, tuple[int, bytes, RowDecoder]] = {}

    def start(self) -> None:
        """Start the workers now (they take a moment to import), not at the first rows."""
        if self._executor is None:
            self._executor = ProcessPoolExecutor(
                self.workers, mp_context=multiprocessing.get_context("forkserver")
            )
            for _ in range(self.workers):
                self._executor.submit(_ready)

    def key(self, decoder: RowDecoder) -> tuple[int, bytes]:
        """The key workers know ``decoder`` by, and its pickled definition."""
        known = self._keys.get(id(decoder))
        if known is None or known[2] is not decoder:
            # The decoder stays referenced here, so its id is not reused while keyed.
            known = (len(self._keys) + 1, pickle.dumps(decoder), decoder)
            self._keys[id(decoder)] = known
        return known[0], known[1]

    def submit(
        self, specs: dict[int, bytes], batch: list[tuple[int, RowsFrame]]
    ) -> Future[list[Decoded]]:
        """Decode a batch of rows events (each with its decoder's key) in a worker."""
        self.start()
        assert self._executor is not None
        return self._executor.submit(_decode_in_worker, specs, batch)

    def close(self) -> None:
        """Stop the workers (pending work is cancelled)."""
        executor, self._executor = self._executor, None
        self._keys.clear()
        if executor is not None:
            executor.shutdown(wait=True, cancel_futures=True)


def ordered_events(
    fetch: Callable[[], Any],
    assembler: TransactionAssembler,
    pool: DecodePool,
    stop: Event,
    *,
    on_event: Callable[[], None] = lambda: None,
) -> Iterator[ChangeEvent]:
    """Change events of the events ``fetch`` returns, rows decoded by ``pool``, in binlog order.

    Ends when ``stop`` is set; raises StreamLostError when ``fetch`` returns None (the
    server ended the stream). Rows events still in flight then are never fed: the source
    restarts from the last boundary the assembler passed.
    """
    window: deque[tuple[list[tuple[int, RowsFrame]], Future[list[Decoded]], int]] = deque()
    in_flight = 0
    batch: list[tuple[int, RowsFrame]] = []
    specs: dict[int, bytes] = {}
    batched = 0
    feed_decoded = assembler.feed_decoded

    def send() -> None:
        nonlocal batch, specs, batched, in_flight
        window.append((batch, pool.submit(specs, batch), batched))
        in_flight += batched
        batch, specs, batched = [], {}, 0

    def ready(
        frames: list[tuple[int, RowsFrame]], future: Future[list[Decoded]]
    ) -> Iterator[ChangeEvent]:
        for (_, frame), decoded in zip(frames, future.result(), strict=True):
            yield from feed_decoded(frame, decoded)

    while not stop.is_set():
        event = fetch()
        if event is None:
            raise StreamLostError("the server ended the binlog stream")
        on_event()
        if type(event) is RowsFrame:
            decoder = assembler.decoder_of(event)
            if decoder is None:
                continue  # a table the filters leave out: never decoded
            key, spec = pool.key(decoder)
            specs[key] = spec
            batch.append((key, event))
            batched += len(event.rows)
            if batched >= pool.batch_bytes:
                send()
            while in_flight > pool.max_in_flight_bytes and window:
                frames, future, size = window.popleft()
                in_flight -= size
                yield from ready(frames, future)
            continue
        if batch:
            send()
        while window:
            frames, future, _ = window.popleft()
            yield from ready(frames, future)
        in_flight = 0
        out = assembler.feed(event)
        if out:
            yield from out
