"""One commit's batch gathered from several gets when the store is smaller than a batch.

A store smaller than ``store.batch_size`` (a small destination's ``buffer_size: 1024``: about
one 1,000-row transaction) would make every commit carry what the store holds while the reader
waits for that commit to free it: one transaction a Delta commit, the reader and the committer
taking turns. The committer instead takes what the store holds and frees it at once (the rows
are the committer's from then on: a failed commit is retried with them, and a run that ends
leaves them to the next, which resumes from the change log's checkpoint, as after a crash),
then takes more while the reader refills the store, until the batch is ``batch_size`` worth
or its oldest event has waited ``batch_timeout_seconds``. So the store's limit bounds what
waits in it, ``batch_size`` what one commit holds, and the lag stays bounded as before.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from cdc_platform.config.batch_mode import BatchMode
from cdc_platform.config.instance import StoreConfig
from cdc_platform.store import Batch, EventStore

__all__ = ["gather_batch"]


def gather_batch(
    store: EventStore,
    first: Batch,
    settings: StoreConfig,
    clock: Callable[[], float] = time.monotonic,
) -> Batch:
    """``first`` and what follows it in the store, freed from the store, as one batch.

    Gathers only when ``first`` is smaller than a batch and younger than the batch timeout
    (the store was full before a batch was), and never with ``ddl_isolation`` (a DDL keeps
    its own commit). Every event returned is already acked: the caller must not ack it.
    """
    ack_point = first.ack_point
    assert ack_point is not None  # a batch with events
    store.ack(ack_point)
    limit = _limit(settings)
    held = _units(first, settings)
    deadline = first.arrived + settings.batch_timeout_seconds
    if settings.ddl_isolation or held >= limit:
        return first
    parts = [first]
    while held < limit:
        remaining = deadline - clock()
        if remaining <= 0:
            break
        wanted = max(1, (limit - held) // (settings.memunit if _by_bytes(settings) else 1))
        more = store.get(wanted, timeout=remaining, max_age=remaining)
        last = more.ack_point
        if last is None:
            break
        store.ack(last)
        parts.append(more)
        held += _units(more, settings)
    if len(parts) == 1:
        return first
    events = tuple(event for part in parts for event in part.events)
    return Batch(events, partial=parts[-1].partial, arrived=first.arrived)


def _by_bytes(settings: StoreConfig) -> bool:
    return settings.batch_mode is BatchMode.MEMSIZE


def _limit(settings: StoreConfig) -> int:
    """A batch's worth: bytes in MEMSIZE mode, events in ITEMSIZE mode."""
    return settings.batch_size * settings.memunit if _by_bytes(settings) else settings.batch_size


def _units(batch: Batch, settings: StoreConfig) -> int:
    return batch.size_bytes if _by_bytes(settings) else len(batch.events)
