"""One stream batch into the change log, retried until it lands, is refused, or the run stops.

The runtime's commit loop hands each batch here. A transient sink error is retried with
backoff; a fencing refusal is checked against the change log first, because an attempt that
reported failure may in fact have landed (then it counts as this batch's commit); any other
refusal ends the run.
"""

from __future__ import annotations

import logging
import threading
import time

from cdc_platform.backfill.commit import PendingCommit
from cdc_platform.errors import CommitRefusedError, SinkError
from cdc_platform.events import EventKind, ResumePosition
from cdc_platform.infra.backoff import Backoff
from cdc_platform.runtime.runtime_metrics import PipelineMetrics
from cdc_platform.sink import Checkpoint, CommitResult, DeltaChangeLog, FencedCommitError
from cdc_platform.sink.report import CommitReport
from cdc_platform.sink.term import WriteTerm
from cdc_platform.store import Batch

__all__ = ["BatchCommitter"]

log = logging.getLogger("cdc_platform.runtime")


class BatchCommitter:
    """Commits the batches of one runtime (``term``, its change log ``sink``); ``stop`` ends a
    retry's wait; failed attempts are counted in ``metrics``."""

    def __init__(  # noqa: PLR0913 (the runtime's parts; the retry's bounds keyword-only)
        self,
        term: WriteTerm,
        sink: DeltaChangeLog,
        stop: threading.Event,
        metrics: PipelineMetrics,
        *,
        retry_initial_seconds: float,
        retry_max_seconds: float,
    ) -> None:
        self.term = term
        self.sink = sink
        self._stop = stop
        self._metrics = metrics
        self._retry_initial = retry_initial_seconds
        self._retry_max = retry_max_seconds

    def commit(self, batch: Batch, batch_seq: int, epoch: int) -> CommitReport | None:
        """Commit one batch, retrying transient failures; None if stopped while retrying."""
        name = self.term.destination
        resume = batch.resume_position()  # names the server of the batch's last transaction
        assert resume is not None
        pending = PendingCommit(self.term, self.sink, batch.events, batch_seq, resume, epoch)
        backoff = Backoff(self._retry_initial, self._retry_max)
        rereads: tuple[str, ...] | None = None
        while True:
            try:
                if rereads is None:
                    rereads = pending.prepare()
                landed = pending.land()
                break
            except FencedCommitError as exc:
                checkpoint = self._landed(batch_seq, epoch, resume)
                if checkpoint is None:
                    log.error("%s: %s", name, exc)
                    raise
                # An earlier attempt that reported failure had in fact landed.
                rows = sum(1 for event in batch.events if event.kind is not EventKind.COMMIT)
                landed = CommitResult(
                    checkpoint.version,
                    rows,
                    checkpoint.last_seq - rows + 1,
                    checkpoint.last_seq,
                    0.0,
                )
                break
            except CommitRefusedError:
                raise
            except SinkError as exc:
                self._metrics.commit_failed()
                delay = backoff.next_delay()
                log.warning(
                    "%s: commit of batch %d failed (%s); retrying in %.1f s",
                    name,
                    batch_seq,
                    exc,
                    delay,
                )
                if self._stop.wait(delay):
                    return None
        last = batch.last
        assert last is not None
        return pending.report_of(
            landed,
            rereads or (),
            lag_seconds=max(0.0, time.time() - last.txn.timestamp),
            partial=batch.partial,
        )

    def _landed(self, batch_seq: int, epoch: int, resume: ResumePosition) -> Checkpoint | None:
        """The checkpoint if this very batch is already in the change log, else None."""
        checkpoint = self.sink.recover()
        if (
            checkpoint is not None
            and checkpoint.batch_seq == batch_seq
            and checkpoint.epoch == epoch
            and checkpoint.resume == resume
        ):
            return checkpoint
        return None
