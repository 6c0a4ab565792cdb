"""Taking a destination's lease to write its change log: one way for every writer.

The CLI's snapshot, the reconciliation's own repair and the supervisor's standby all take the
lease the same way: the lowest acceptable epoch is one above the change log's newest epoch
(a lease store that was reset must not hand out an epoch the log already fences off), then
the lease is acquired, and the writer's commit gate passes only while the lease is held.
Before its first lease a writer checks the lake (:func:`~cdc_platform.sink.lake_check.
check_lake_once`: reachable, and atomic with one winner for commits and side files).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import replace

from cdc_platform.errors import CdcError, LeaseLostError
from cdc_platform.ha.lease import Lease
from cdc_platform.sink.delta import DeltaChangeLog
from cdc_platform.sink.lake_check import check_lake_once
from cdc_platform.sink.term import WriteTerm

__all__ = ["epoch_floor", "lease_gate", "take_lease"]

log = logging.getLogger(__name__)


def epoch_floor(term: WriteTerm) -> int:
    """Lowest epoch the change log accepts from a new holder (its epoch + 1, or 0).

    A change log that cannot be read yet gives 0 (logged): the floor only saves a doomed
    term, the sink's epoch fence refuses an old epoch all the same.
    """
    sink = DeltaChangeLog(term.table_uri, term.destination, storage_options=term.storage_options)
    try:
        checkpoint = sink.recover()
    except CdcError as exc:
        log.warning("%s: cannot read the checkpoint yet (%s)", term.destination, exc)
        return 0
    finally:
        sink.close()
    return checkpoint.epoch + 1 if checkpoint is not None else 0


def lease_gate(lease: Lease, destination: str, epoch: int, doing: str) -> Callable[[], None]:
    """A commit gate that passes while ``lease`` is held and raises LeaseLostError after."""

    def gate() -> None:
        if not lease.is_held():
            raise LeaseLostError(destination, epoch, f"lost during {doing}")

    return gate


def take_lease(
    lease: Lease,
    term: WriteTerm,
    *,
    timeout: float | None = None,
    stop: threading.Event | None = None,
    doing: str = "a write",
) -> WriteTerm | None:
    """Wait for ``lease`` (free, or released by its holder) and return ``term`` held under it.

    The returned term carries the new epoch and, unless ``term`` brings its own gate, a gate
    that raises once the lease is lost (``doing`` names the work in that error). None when
    ``timeout`` passed or ``stop`` was set first. The lease must be started.
    """
    check_lake_once(term.lake)  # once per process and lake: a store that is unsafe is refused
    epoch = lease.acquire(timeout=timeout, min_epoch=epoch_floor(term), stop=stop)
    if epoch is None:
        return None
    gate = term.commit_gate or lease_gate(lease, term.destination, epoch, doing)
    return replace(term, epoch=epoch, commit_gate=gate)
