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
from dataclasses import dataclass, field, replace
from typing import TypeVar

from cdc_platform.backfill.commit import PendingCommit
from cdc_platform.errors import CdcError, CommitRefusedError, SinkError, SourceError
from cdc_platform.events import EventKind, ResumePosition
from cdc_platform.runtime.batch_gathering import gather_batch
from cdc_platform.sink import Checkpoint, CommitResult, FencedCommitError
from cdc_platform.sink.report import CommitReport
from cdc_platform.sink.start_record import StartRecord
from cdc_platform.sink.term import WriteTerm
from cdc_platform.source import BinlogSource  # noqa: F401 - tests patch it through this module
from cdc_platform.source.factory import Source, open_source
from cdc_platform.store import Batch, EventStore, StoreClosedError

__all__ = ["DestinationRuntime", "RunSummary", "RuntimeMetrics"]

log = logging.getLogger("cdc_platform.runtime")

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class RuntimeMetrics:
    """A snapshot of the pipeline's progress, readable from any thread."""

    destination: str
    state: str = "starting"
    events_total: int = 0
    rows_total: int = 0
    batches_total: int = 0
    events_per_second: float = 0.0
    rows_per_second: float = 0.0
    buffer_items: int = 0
    buffer_bytes: int = 0
    buffer_capacity_items: int = 0
    buffer_capacity_bytes: int | None = None
    last_batch_seq: int = 0
    last_position: str | None = None
    last_commit_at: float | None = None
    lag_seconds: float | None = None
    """Now minus :attr:`source_time` (live in :meth:`DestinationRuntime.metrics`)."""
    source_time: float | None = None
    """Source time (epoch seconds) up to which everything is committed: the last committed
    transaction's binlog timestamp, or the last heartbeat of an idle server."""
    buffer_fill: float = 0.0
    """How full the ring buffer is, 0..1 (the larger of items and bytes)."""
    source_reconnects: int = 0
    xa_prepared_age_seconds: float | None = None
    """How long the oldest prepared, uncommitted XA transaction held has waited."""
    commit_failures: int = 0
    idle_checkpoints: int = 0
    """Empty commits that moved the checkpoint to where an idle server's heartbeat was."""


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


@dataclass
class _Rates:
    """Events/s and rows/s over the last metrics interval."""

    at: float = field(default_factory=time.monotonic)
    events: int = 0
    rows: int = 0


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
        self.table_uri = term.table_uri
        self._recorder = term.recorder
        self._idle_every = config.sink.idle_checkpoint_seconds
        self._reconnects_seen = 0
        self._last_commit = time.monotonic()
        self._epoch: int | None = term.epoch
        self._metrics_interval = metrics_interval_seconds
        self._retry_initial = commit_retry_initial_seconds
        self._retry_max = commit_retry_max_seconds
        self._stop = threading.Event()
        self._stop_reason = "stop requested"
        self._source_error: CdcError | None = None
        self._lock = threading.Lock()
        self._metrics = RuntimeMetrics(destination=name)
        self.sink = term.open_change_log()
        store_config = config.store
        self.store = EventStore(
            store_config.buffer_size,
            store_config.memunit,
            store_config.batch_mode,
            store_config.ddl_isolation,
        )
        self.source: Source | None = None

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
        stats = self.store.stats()
        source = self.source
        fill = stats.items / stats.capacity_items
        if stats.capacity_bytes:
            fill = max(fill, stats.bytes / stats.capacity_bytes)
        with self._lock:
            source_time = self._metrics.source_time
            return replace(
                self._metrics,
                buffer_items=stats.items,
                buffer_bytes=stats.bytes,
                buffer_capacity_items=stats.capacity_items,
                buffer_capacity_bytes=stats.capacity_bytes,
                buffer_fill=min(1.0, fill),
                source_reconnects=source.reconnects if source is not None else 0,
                xa_prepared_age_seconds=(
                    source.oldest_prepared_xa_age() if source is not None else None
                ),
                lag_seconds=None if source_time is None else max(0.0, time.time() - source_time),
            )

    def _observe(self) -> None:
        """Hand the recorder the figures measured elsewhere (buffer fill, reconnects)."""
        m = self.metrics()
        self._recorder.buffer(m.buffer_fill)
        self._recorder.xa_prepared(m.xa_prepared_age_seconds)
        if m.source_reconnects > self._reconnects_seen:
            self._recorder.reconnected(m.source_reconnects - self._reconnects_seen)
            self._reconnects_seen = m.source_reconnects

    def _caught_up(self, source_time: float) -> None:
        with self._lock:
            self._metrics = replace(self._metrics, source_time=source_time)
        self._recorder.caught_up(source_time)

    def _update(self, **changes: object) -> None:
        with self._lock:
            self._metrics = replace(self._metrics, **changes)  # type: ignore[arg-type]  # the fields' values differ in type; each caller names its own

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
        self._update(state="running", last_batch_seq=batch_seq, last_position=str(resume))
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
        self._update(state="stopped" if error is None else "failed")
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
        delay = source.reconnect_initial_seconds
        attempt = 0
        while True:
            try:
                return step()
            except CdcError as exc:
                if not exc.transient or self._stop.is_set():
                    raise
                attempt += 1
                self._update(state="waiting for the source")
                log.warning(
                    "%s: source %s:%d not reachable at start (attempt %d): %s; retrying in %.1f s",
                    self.name,
                    source.host,
                    source.port,
                    attempt,
                    exc,
                    delay,
                )
                if self._stop.wait(delay):
                    return None
                delay = min(delay * 2, source.reconnect_max_seconds)

    def _open_source(self, resume: ResumePosition | None) -> Source:
        return open_source(
            self.config.source,
            resume=resume,
            password=self.term.password,
            table_uri=self.table_uri,
            storage_options=self.term.storage_options,
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
        rates = _Rates()
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
            self._observe()
            if now >= next_metrics:
                self._log_metrics(rates)
                rates = _Rates()
                next_metrics = now + self._metrics_interval
            if not batch.events or _heartbeats_only(batch):
                if batch.events:
                    heard_idle = True
                    try:
                        batch_seq, resume = self._idle(batch, batch_seq, resume, epoch, now)
                    except CdcError as exc:
                        return batch_seq, resume, exc
                if exit_when_idle is not None and _idle_long_enough(
                    now - last_activity, exit_when_idle, heard_idle=heard_idle
                ):
                    self.request_stop(f"idle for {exit_when_idle:g} s")
                continue
            last_activity = now
            heard_idle = False
            batch = gather_batch(self.store, batch, store_config)  # acked: the rows are ours
            try:
                report = self._commit(batch, batch_seq + 1, epoch)
            except CdcError as exc:
                return batch_seq, resume, exc
            if report is None:  # stop requested while retrying: the batch is abandoned (the
                break  # next run reads it again from the change log's checkpoint)
            batch_seq, resume = report.batch_seq, report.resume
            ack_point = batch.ack_point
            assert ack_point is not None
            self._last_commit = now
            self._caught_up(ack_point.txn.timestamp)
            rates.events += report.events
            rates.rows += report.rows
            with self._lock:
                metrics = self._metrics
                self._metrics = replace(
                    metrics,
                    events_total=metrics.events_total + report.events,
                    rows_total=metrics.rows_total + report.rows,
                    batches_total=metrics.batches_total + 1,
                    last_batch_seq=batch_seq,
                    last_position=str(resume),
                    last_commit_at=time.time(),
                )
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
            report = self._commit(batch, batch_seq + 1, epoch)
            if report is None:  # stop requested while retrying
                self.store.rollback()
                return batch_seq, resume
            batch_seq, resume = report.batch_seq, report.resume
            self._last_commit = now
            with self._lock:
                metrics = self._metrics
                self._metrics = replace(
                    metrics,
                    batches_total=metrics.batches_total + 1,
                    idle_checkpoints=metrics.idle_checkpoints + 1,
                    last_batch_seq=batch_seq,
                    last_position=str(resume),
                    last_commit_at=time.time(),
                )
            self.term.report(report)
        self.store.ack(ack_point)
        self._caught_up(ack_point.txn.timestamp)
        return batch_seq, resume

    def _commit(self, batch: Batch, batch_seq: int, epoch: int) -> CommitReport | None:
        """Commit one batch, retrying transient failures; None if stopped while retrying."""
        resume = batch.resume_position()  # names the server of the batch's last transaction
        assert resume is not None
        pending = PendingCommit(self.term, self.sink, batch.events, batch_seq, resume, epoch)
        delay = self._retry_initial
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
                    log.error("%s: %s", self.name, exc)
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
                self._update(commit_failures=self._metrics.commit_failures + 1)
                log.warning(
                    "%s: commit of batch %d failed (%s); retrying in %.1f s",
                    self.name,
                    batch_seq,
                    exc,
                    delay,
                )
                if self._stop.wait(delay):
                    return None
                delay = min(delay * 2, self._retry_max)
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

    def _log_metrics(self, rates: _Rates) -> None:
        elapsed = max(1e-9, time.monotonic() - rates.at)
        self._update(events_per_second=rates.events / elapsed, rows_per_second=rates.rows / elapsed)
        m = self.metrics()
        lag = "-" if m.lag_seconds is None else f"{m.lag_seconds:.1f}"
        log.info(
            "%s: batch=%d events/s=%.0f rows/s=%.0f buffer=%d items/%d bytes lag_s=%s "
            "position=%s reconnects=%d",
            self.name,
            m.last_batch_seq,
            m.events_per_second,
            m.rows_per_second,
            m.buffer_items,
            m.buffer_bytes,
            lag,
            m.last_position,
            m.source_reconnects,
            extra={
                "position": m.last_position,
                "epoch": self._epoch,
                "batch_seq": m.last_batch_seq,
                "lag_seconds": None if m.lag_seconds is None else round(m.lag_seconds, 3),
                "rows_per_second": round(m.rows_per_second, 1),
                "events_per_second": round(m.events_per_second, 1),
                "buffer_fill": round(m.buffer_fill, 4),
                "reconnects": m.source_reconnects,
            },
        )


IDLE_WITHOUT_HEARTBEAT_FACTOR = 4.0
"""A stream that has sent no heartbeat yet (still connecting, or catching up on a busy
machine) counts as idle only after this many times ``exit_when_idle``."""


def _idle_long_enough(quiet: float, exit_when_idle: float, *, heard_idle: bool) -> bool:
    """Whether ``--exit-when-idle`` may stop the run: quiet that long and the server said it
    had nothing more (a heartbeat), or quiet much longer (sources without heartbeats)."""
    if heard_idle:
        return quiet >= exit_when_idle
    return quiet >= exit_when_idle * IDLE_WITHOUT_HEARTBEAT_FACTOR


def _heartbeats_only(batch: Batch) -> bool:
    """True when every event of ``batch`` is an idle server's heartbeat (no change, no
    transaction): see ``Transaction.idle``."""
    return all(event.txn.idle for event in batch.events)
