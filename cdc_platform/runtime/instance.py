"""One destination's pipeline: binlog source thread -> event store -> Delta change log.

The ordering that makes it exactly-once: a batch is acked in the store only after its Delta
commit landed, and the commit itself carries the batch number (fencing) and the resume
position, so a restart continues from exactly what the change log holds. Nothing is acked on
the source side: after a crash, the source is re-read from the committed position.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from cdc_platform.backfill.commit import PendingCommit
from cdc_platform.errors import CdcError, SourceError
from cdc_platform.events import ResumePosition
from cdc_platform.infra.backoff import Backoff
from cdc_platform.runtime.batch_commit import BatchCommitter
from cdc_platform.runtime.batch_gathering import gather_batch
from cdc_platform.runtime.idle import heartbeats_only, idle_long_enough
from cdc_platform.runtime.runtime_metrics import PipelineMetrics, Rates, RuntimeMetrics
from cdc_platform.sink.start_record import StartRecord
from cdc_platform.sink.term import WriteTerm
from cdc_platform.source.factory import Source, open_source
from cdc_platform.store import Batch, EventStore, StoreClosedError

__all__ = ["DestinationRuntime", "RunSummary"]

log = logging.getLogger("cdc_platform.runtime")

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class RunSummary:
    """Why and where a run ended."""

    destination: str
    reason: str
    batches: int
    rows: int
    last_batch_seq: int
    resume: ResumePosition | None
    error: CdcError | None = None


class DestinationRuntime:
    """Runs one destination until stopped, idle (optional) or failed.

    ``term.epoch`` is the fencing token of the lease this process holds; the sink refuses to
    commit once a newer epoch has committed. Without a lease backend (None) the checkpoint's
    own epoch is used, which still refuses a second writer of the same batch. The term's gate
    runs right before every Delta commit and raises (e.g. LeaseLostError) to forbid it.

    Without a checkpoint it begins where ``start:`` says. The snapshot of ``start: {mode:
    initial}`` is side work of the lease holder (:mod:`.side_work`), done before this runtime
    is started: a runtime run on its own begins at the binlog's current end for ``initial``.
    """

    def __init__(
        self,
        term: WriteTerm,
        *,
        metrics_interval_seconds: float = 10.0,
        commit_retry_initial_seconds: float = 0.5,
        commit_retry_max_seconds: float = 30.0,
    ) -> None:
        name, config = term.destination, term.config
        self.term = term
        self.name = name
        self.config = config
        self._idle_every = config.sink.idle_checkpoint_seconds
        self._last_commit = time.monotonic()
        self._epoch: int | None = term.epoch
        self._metrics_interval = metrics_interval_seconds
        self._stop = threading.Event()
        self._stop_reason = "stop requested"
        self._source_error: CdcError | None = None
        self.sink = term.open_change_log()
        store_config = config.store
        self.store = EventStore(
            store_config.buffer_size,
            store_config.memunit,
            store_config.batch_mode,
            store_config.ddl_isolation,
        )
        self.source: Source | None = None
        self._figures = PipelineMetrics(name, self.store, term.recorder)
        self._committer = BatchCommitter(
            term,
            self.sink,
            self._stop,
            self._figures,
            retry_initial_seconds=commit_retry_initial_seconds,
            retry_max_seconds=commit_retry_max_seconds,
        )

    # -- control ---------------------------------------------------------------------------

    def request_stop(self, reason: str = "stop requested") -> None:
        """Ask the run to end after the in-flight commit (thread- and signal-safe)."""
        if not self._stop.is_set():
            self._stop_reason = reason
        self._stop.set()

    @property
    def stopping(self) -> bool:
        """True once a stop was requested or the pipeline failed."""
        return self._stop.is_set()

    def metrics(self) -> RuntimeMetrics:
        """The latest metrics snapshot, with live buffer figures."""
        return self._figures.live(self.source)

    # -- run -------------------------------------------------------------------------------

    def run(self, *, exit_when_idle_seconds: float | None = None) -> RunSummary:
        """Recover, stream and commit until stopped; returns why it ended.

        Terminal errors (bad source settings, purged binlog, fencing) end the run with the
        error in the summary and every committed batch intact; transient sink errors, and a
        source that cannot be reached at start, are retried with backoff. A transient fault of
        the change log before streaming (its recovery, the start's pin) ends the run with the
        error, which says so (``transient``): the lease supervisor runs it again.
        """
        batch_seq: int = 0
        resume: ResumePosition | None = None
        try:
            checkpoint = self.sink.recover()
            term_epoch = self.term.epoch
            epoch = (
                term_epoch if term_epoch is not None else (checkpoint.epoch if checkpoint else 0)
            )
            batch_seq = checkpoint.batch_seq if checkpoint else 0
            resume = checkpoint.resume if checkpoint else None
            self.source = self._open_source(resume)
            if self._until_reachable(self.source.check) is None:
                self.sink.close()
                return RunSummary(self.name, self._stop_reason, 0, 0, batch_seq, resume)
            if resume is None:
                # Pin the start position durably before reading: otherwise a crash before the
                # first commit would restart at a later "current" position and lose changes.
                source, start = self.source, self.config.start
                resume = self._until_reachable(lambda: source.start_position(start))
                if resume is None:
                    self.sink.close()
                    return RunSummary(self.name, self._stop_reason, 0, 0, batch_seq, None)
                batch_seq += 1
                self.term.check_gate()
                StartRecord.write(
                    self.term.layout.start_record,
                    start,
                    resume,
                    epoch=epoch,
                )
                PendingCommit(self.term, self.sink, (), batch_seq, resume, epoch).land()
                log.info(
                    "%s: no checkpoint, starting at %s (start: %s)",
                    self.name,
                    resume,
                    start.describe(),
                )
                self.source = self._open_source(resume)
            else:
                log.info(
                    "%s: resuming after batch %d at %s (epoch %d)",
                    self.name,
                    batch_seq,
                    resume,
                    epoch,
                    extra={"position": str(resume), "epoch": epoch, "batch_seq": batch_seq},
                )
        except CdcError as exc:
            log.log(logging.WARNING if exc.transient else logging.ERROR, "%s: %s", self.name, exc)
            self.sink.close()
            return RunSummary(self.name, "failed", 0, 0, batch_seq, resume, exc)

        self._epoch = epoch
        self._figures.update(state="running", last_batch_seq=batch_seq, last_position=str(resume))
        reader = threading.Thread(target=self._read, name=f"cdc-source-{self.name}", daemon=True)
        reader.start()
        error: CdcError | None = None
        try:
            batch_seq, resume, error = self._commit_loop(
                batch_seq, resume, epoch, exit_when_idle_seconds
            )
        finally:
            self._stop.set()
            self.source.stop()
            self.store.close()
            reader.join(timeout=30)
            self.sink.close()
        error = error or self._source_error
        reason = "failed" if error is not None else self._stop_reason
        metrics = self.metrics()
        self._figures.update(state="stopped" if error is None else "failed")
        log.info(
            "%s: stopped (%s) after batch %d at %s",
            self.name,
            reason,
            batch_seq,
            resume,
            extra={"position": str(resume), "epoch": epoch, "batch_seq": batch_seq},
        )
        return RunSummary(
            self.name,
            reason,
            metrics.batches_total,
            metrics.rows_total,
            batch_seq,
            resume,
            error,
        )

    def _until_reachable(self, step: Callable[[], T]) -> T | None:
        """``step`` of the source's start-up, retried while the source is unreachable.

        A server that is down when a run starts (a database restart during a deploy) is the
        same transient fault as one lost mid-stream: the same backoff, each attempt logged with
        the address (never the password). None when a stop was requested while waiting.
        """
        source = self.config.source
        backoff = Backoff(source.reconnect_initial_seconds, source.reconnect_max_seconds)
        while True:
            try:
                return step()
            except CdcError as exc:
                if not exc.transient or self._stop.is_set():
                    raise
                delay = backoff.next_delay()
                self._figures.update(state="waiting for the source")
                log.warning(
                    "%s: source %s:%d not reachable at start (attempt %d): %s; retrying in %.1f s",
                    self.name,
                    source.host,
                    source.port,
                    backoff.attempts,
                    exc,
                    delay,
                )
                if self._stop.wait(delay):
                    return None

    def _open_source(self, resume: ResumePosition | None) -> Source:
        return open_source(
            self.config.source,
            resume=resume,
            password=self.term.password,
            table_uri=self.term.layout.change_log,
            storage_options=self.term.layout.storage_options,
            heartbeats=True,
        )

    def _read(self) -> None:
        """Source thread: binlog events into the store, until stopped or failed."""
        source = self.source
        assert source is not None
        try:
            for events in source.event_lists():
                self.store.put(events)
                if self._stop.is_set():
                    break
        except StoreClosedError:
            pass
        except CdcError as exc:
            log.error("%s: source failed: %s", self.name, exc)
            self._source_error = exc
            self.request_stop("source failed")
        except Exception as exc:
            # A bug must end the run loudly, not leave the committer waiting on an empty store.
            log.exception("%s: the source thread crashed", self.name)
            self._source_error = SourceError(f"the source thread crashed: {exc!r}")
            self.request_stop("source failed")

    def _commit_loop(
        self,
        batch_seq: int,
        resume: ResumePosition | None,
        epoch: int,
        exit_when_idle: float | None,
    ) -> tuple[int, ResumePosition | None, CdcError | None]:
        store_config = self.config.store
        last_activity = time.monotonic()
        heard_idle = False  # a heartbeat came after the last change: the stream is caught up
        next_metrics = time.monotonic() + self._metrics_interval
        rates = Rates()
        while not self._stop.is_set():
            try:
                batch = self.store.get(
                    store_config.batch_size,
                    timeout=store_config.batch_timeout_seconds,
                    max_age=store_config.batch_timeout_seconds,
                )
            except StoreClosedError:
                break
            now = time.monotonic()
            self._figures.observe(self.source)
            if now >= next_metrics:
                self._figures.log_rates(rates, self.source, self._epoch)
                rates = Rates()
                next_metrics = now + self._metrics_interval
            if not batch.events or heartbeats_only(batch):
                if batch.events:
                    heard_idle = True
                    try:
                        batch_seq, resume = self._idle(batch, batch_seq, resume, epoch, now)
                    except CdcError as exc:
                        return batch_seq, resume, exc
                if exit_when_idle is not None and idle_long_enough(
                    now - last_activity, exit_when_idle, heard_idle=heard_idle
                ):
                    self.request_stop(f"idle for {exit_when_idle:g} s")
                continue
            last_activity = now
            heard_idle = False
            batch = gather_batch(self.store, batch, store_config)  # acked: the rows are ours
            try:
                report = self._committer.commit(batch, batch_seq + 1, epoch)
            except CdcError as exc:
                return batch_seq, resume, exc
            if report is None:  # stop requested while retrying: the batch is abandoned (the
                break  # next run reads it again from the change log's checkpoint)
            batch_seq, resume = report.batch_seq, report.resume
            ack_point = batch.ack_point
            assert ack_point is not None
            self._last_commit = now
            self._figures.caught_up(ack_point.txn.timestamp)
            rates.events += report.events
            rates.rows += report.rows
            self._figures.committed(report)
            self.term.report(report)
        return batch_seq, resume, None

    def _idle(
        self, batch: Batch, batch_seq: int, resume: ResumePosition | None, epoch: int, now: float
    ) -> tuple[int, ResumePosition | None]:
        """A batch of heartbeats only: everything the server wrote is committed, so the lag's
        source time is the heartbeat's. The heartbeat's position is committed (an empty
        commit) only when it moved and the last commit is ``sink.idle_checkpoint_seconds``
        old: a heartbeat every second must not cost a Delta commit every second."""
        ack_point = batch.ack_point
        assert ack_point is not None
        position = batch.resume_position()
        if position != resume and now - self._last_commit >= self._idle_every:
            report = self._committer.commit(batch, batch_seq + 1, epoch)
            if report is None:  # stop requested while retrying
                self.store.rollback()
                return batch_seq, resume
            batch_seq, resume = report.batch_seq, report.resume
            self._last_commit = now
            self._figures.idle_checkpoint(report)
            self.term.report(report)
        self.store.ack(ack_point)
        self._figures.caught_up(ack_point.txn.timestamp)
        return batch_seq, resume
