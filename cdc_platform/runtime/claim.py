"""The epoch claim of a new lease term: an empty commit with the new epoch, before any write.

From that commit on the change log refuses every commit of an older epoch, so a holder that
was paused (SIGSTOP, a GC pause, a frozen VM) and wakes up after the take-over writes nothing,
even if it has not noticed yet that its lease is gone (docs/ha.md: fencing).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from cdc_platform.errors import LeaseLostError
from cdc_platform.sink import DeltaChangeLog, FencedCommitError
from cdc_platform.sink.term import WriteTerm

__all__ = ["claim_change_log"]

log = logging.getLogger("cdc_platform.runtime")

_CLAIM_ATTEMPTS = 5
"""Claims raced by the previous holder's last commits before the term gives up."""


def claim_change_log(term: WriteTerm, epoch: int, *, gate: Callable[[], None]) -> None:
    """Commit an empty batch with ``epoch`` (``gate`` passes it only while the lease is held).

    Raises:
        LeaseLostError: the change log holds a newer epoch, or kept racing the claim.
        SinkError: the change log could not be read or written; ``transient`` says whether
            the caller should try again (the lease supervisor does, with its backoff).
    """
    sink = term.open_change_log()
    try:
        for _ in range(_CLAIM_ATTEMPTS):
            if _claim_once(sink, term.destination, epoch, gate):
                return
    finally:
        sink.close()
    raise LeaseLostError(term.destination, epoch, "could not claim the change log")


def _claim_once(sink: DeltaChangeLog, name: str, epoch: int, gate: Callable[[], None]) -> bool:
    """One try: True when claimed (or nothing to claim), False when a commit raced us."""
    checkpoint = sink.recover()
    if checkpoint is None:
        return True  # the runtime's first commit pins the start and carries the epoch
    if checkpoint.epoch > epoch:
        raise LeaseLostError(
            name, epoch, f"the change log already holds a commit of epoch {checkpoint.epoch}"
        )
    if checkpoint.epoch == epoch:
        return True
    gate()
    try:
        sink.commit((), batch_seq=checkpoint.batch_seq + 1, resume=checkpoint.resume, epoch=epoch)
    except FencedCommitError as exc:
        if exc.table_epoch is not None and exc.table_epoch > epoch:
            raise LeaseLostError(name, epoch, str(exc)) from exc
        return False  # the previous holder's last batch landed meanwhile: re-read
    log.info(
        "%s: epoch %d claimed the change log at batch %d (previous epoch %d)",
        name,
        epoch,
        checkpoint.batch_seq + 1,
        checkpoint.epoch,
    )
    return True
