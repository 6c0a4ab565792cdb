"""The worker side of parallel decoding (:mod:`.decode_pool`): what a decode worker process
imports and runs. It imports only the row decoders and the rows frame, not the rest of the
source, so each worker holds little beyond the interpreter."""

from __future__ import annotations

import pickle

from cdc_platform.source.stream.rows_framing import UPDATE, RowsFrame
from cdc_platform.source.values import RowDecoder

__all__ = ["MAX_DECODERS", "Decoded", "decode_frame", "decode_in_worker", "worker_ready"]

Decoded = list[tuple[str, str]] | list[tuple[str, str, str]]


def decode_frame(decoder: RowDecoder, frame: RowsFrame) -> Decoded:
    """The JSON images of one rows event: (image, pk) per row, (before, after, pk) for
    updates."""
    if frame.kind == UPDATE:
        return decoder.updates(frame.rows, frame.present, frame.present_after)
    return decoder.images(frame.rows, frame.present)


_decoders: dict[int, RowDecoder] = {}
"""Each worker's decoders, by the key the pool gave the table version."""

MAX_DECODERS = 4096
"""Table versions kept by the pool and by each worker (a new one per table map after every
rotation or DDL); past that the caches start again."""


def decode_in_worker(specs: dict[int, bytes], batch: list[tuple[int, RowsFrame]]) -> list[Decoded]:
    out: list[Decoded] = []
    for key, frame in batch:
        decoder = _decoders.get(key)
        if decoder is None:
            if len(_decoders) >= MAX_DECODERS:
                _decoders.clear()  # keys are never reused: rebuilt from specs if needed
            decoder = pickle.loads(specs[key])  # noqa: S301 -- our own pickle, from the parent
            _decoders[key] = decoder
        out.append(decode_frame(decoder, frame))
    return out


def worker_ready() -> None:
    """A first task: the worker has started and imported the decoders."""
