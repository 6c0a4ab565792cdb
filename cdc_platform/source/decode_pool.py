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

__all__ = ["DEFAULT_IN_FLIGHT_BYTES", "DecodePool", "decode_frame", "ordered_events"]

DEFAULT_IN_FLIGHT_BYTES = 8 << 20
"""Row bytes sent to the workers and not yet fed to the assembler, at most (beyond one
event bigger than that on its own)."""

Decoded = list[tuple[str, str]] | list[tuple[str, str, str]]


def decode_frame(decoder: RowDecoder, frame: RowsFrame) -> Decoded:
    """The JSON images of one rows event: (image, pk) per row, (before, after, pk) for
    updates."""
    if frame.kind == UPDATE:
        return decoder.updates(frame.rows, frame.present, frame.present_after)
    return decoder.images(frame.rows, frame.present)


_worker_decoders: dict[int, RowDecoder] = {}
"""Each worker's decoders, by the key the pool gave the table version."""


def _decode_in_worker(key: int, spec: bytes, frame: RowsFrame) -> Decoded:
    decoder = _worker_decoders.get(key)
    if decoder is None:
        decoder = pickle.loads(spec)  # noqa: S301 -- our own pickle, from the parent process
        _worker_decoders[key] = decoder
    return decode_frame(decoder, frame)


class DecodePool:
    """``workers`` processes decoding rows events; started at the first :meth:`submit`.

    Workers are started with ``forkserver`` (never a fork of the multi-threaded reader
    process) and import only the decoding modules.
    """

    def __init__(self, workers: int, *, max_in_flight_bytes: int = DEFAULT_IN_FLIGHT_BYTES) -> None:
        self.workers = workers
        self.max_in_flight_bytes = max_in_flight_bytes
        self._executor: ProcessPoolExecutor | None = None
        self._keys: dict[int, tuple[int, bytes, RowDecoder]] = {}

    def submit(self, decoder: RowDecoder, frame: RowsFrame) -> Future[Decoded]:
        """Decode ``frame`` with ``decoder`` in a worker."""
        if self._executor is None:
            self._executor = ProcessPoolExecutor(
                self.workers, mp_context=multiprocessing.get_context("forkserver")
            )
        known = self._keys.get(id(decoder))
        if known is None or known[2] is not decoder:
            # The decoder is kept referenced here, so its id is not reused while keyed.
            known = (len(self._keys) + 1, pickle.dumps(decoder), decoder)
            self._keys[id(decoder)] = known
        return self._executor.submit(_decode_in_worker, known[0], known[1], frame)

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
    window: deque[tuple[RowsFrame, Future[Decoded]]] = deque()
    in_flight = 0
    max_in_flight_bytes = pool.max_in_flight_bytes
    feed_decoded = assembler.feed_decoded
    while not stop.is_set():
        event = fetch()
        if event is None:
            raise StreamLostError("the server ended the binlog stream")
        on_event()
        if type(event) is RowsFrame:
            decoder = assembler.decoder_of(event)
            if decoder is None:
                continue  # a table the filters leave out: never decoded
            window.append((event, pool.submit(decoder, event)))
            in_flight += len(event.rows)
            while in_flight > max_in_flight_bytes and window:
                frame, future = window.popleft()
                in_flight -= len(frame.rows)
                yield from feed_decoded(frame, future.result())
            continue
        while window:
            frame, future = window.popleft()
            yield from feed_decoded(frame, future.result())
        in_flight = 0
        out = assembler.feed(event)
        if out:
            yield from out
