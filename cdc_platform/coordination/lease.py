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

from cdc_platform.errors import CdcError, LeaseError, LeaseLostError
from cdc_platform.ha.lease import Lease
from cdc_platform.sink.delta import DeltaChangeLog
from cdc_platform.sink.lake_check import check_lake_once
from cdc_platform.sink.term import WriteTerm

__all__ = ["MAX_EPOCH_GAP", "check_epoch", "epoch_floor", "lease_gate", "take_lease"]

log = logging.getLogger(__name__)


MAX_EPOCH_GAP = 10_000
"""How far a new epoch may lie above the change log's before it is refused. Each acquisition
adds one, so only a store written by someone else (a ZooKeeper without ACLs, a hand edit)
gets that far in a destination's lifetime; the sink fences by epoch, so an epoch near the
integer limit would leave no epoch for any later holder."""


def check_epoch(destination: str, epoch: int, floor: int, backend: str) -> None:
    """Refuse an epoch ``epoch`` from the lease store far above ``floor`` (the change log's
    epoch + 1): it is not trusted (LeaseError saying what to check)."""
    if epoch - floor > MAX_EPOCH_GAP:
        raise LeaseError(
            f"{destination}: the {backend} lease store handed out epoch {epoch}, more than "
            f"{MAX_EPOCH_GAP} above the change log's next epoch {floor}: it was not written "
            "by this platform's acquisitions (a lease store open to others, e.g. ZooKeeper "
            "without ACLs, or a hand edit). Find out who wrote it, then set the destination's "
            f"epoch in the lease store back to {floor - 1} (ZooKeeper: the node "
            "<root>/destinations/<name>/epoch; database: the epoch column of its row)"
        )


def epoch_floor(term: WriteTerm) -> int:
    """Lowest epoch the change log accepts from a new holder (its epoch + 1, or 0).

    A change log that cannot be read yet gives 0 (logged): the floor only saves a doomed
    term, the sink's epoch fence refuses an old epoch all the same.
    """
    sink = DeltaChangeLog(
        term.layout.change_log, term.destination, storage_options=term.layout.storage_options
    )
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

    Raises:
        LeaseError: the lease store handed out an epoch more than :data:`MAX_EPOCH_GAP` above
            the change log's (the lease is released again): not trusted, see
            :func:`check_epoch`.
    """
    check_lake_once(
        term.layout.lake if term.checked_lake else None
    )  # once per process and lake: a store that is unsafe is refused
    floor = epoch_floor(term)
    epoch = lease.acquire(timeout=timeout, min_epoch=floor, stop=stop)
    if epoch is None:
        return None
    try:
        check_epoch(term.destination, epoch, floor, lease.backend)
    except LeaseError:
        lease.release()
        raise
    gate = term.commit_gate or lease_gate(lease, term.destination, epoch, doing)
    return replace(term, epoch=epoch, commit_gate=gate)
