"""The figures of one destination's pipeline: what the commit loop counts, read from any thread.

:class:`RuntimeMetrics` is the snapshot (``DestinationRuntime.metrics()``, the supervisor's
status, the CLI); :class:`PipelineMetrics` holds it under a lock, adds the live buffer and
source figures on read, hands the recorder what is measured here (buffer fill, reconnects, the
caught-up source time) and writes the periodic metrics log line.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field, replace

from cdc_platform.infra.recorder import MetricsRecorder
from cdc_platform.sink.report import CommitReport
from cdc_platform.source.factory import Source
from cdc_platform.store import EventStore

__all__ = ["PipelineMetrics", "Rates", "RuntimeMetrics"]

log = logging.getLogger("cdc_platform.runtime")


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
    binlog_retention_headroom_seconds: float | None = None
    """The server's binlog retention minus the lag: the time left at least before the binlog
    a restart needs may be purged (``inf``: kept for ever)."""
    commit_failures: int = 0
    idle_checkpoints: int = 0
    """Empty commits that moved the checkpoint to where an idle server's heartbeat was."""


@dataclass
class Rates:
    """Events/s and rows/s over the last metrics interval."""

    at: float = field(default_factory=time.monotonic)
    events: int = 0
    rows: int = 0


class PipelineMetrics:
    """One runtime's figures; see the module docstring. Written by the commit loop only."""

    def __init__(self, destination: str, store: EventStore, recorder: MetricsRecorder) -> None:
        self.name = destination
        self._store = store
        self._recorder = recorder
        self._lock = threading.Lock()
        self._metrics = RuntimeMetrics(destination=destination)
        self._reconnects_seen = 0

    def live(self, source: Source | None) -> RuntimeMetrics:
        """The latest snapshot, with live buffer figures (and ``source``'s)."""
        stats = self._store.stats()
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
                binlog_retention_headroom_seconds=(
                    source.binlog_retention_headroom(source_time) if source is not None else None
                ),
            )

    def observe(self, source: Source | None) -> None:
        """Hand the recorder the figures measured elsewhere (buffer fill, reconnects)."""
        m = self.live(source)
        self._recorder.buffer(m.buffer_fill)
        self._recorder.xa_prepared(m.xa_prepared_age_seconds)
        self._recorder.retention_headroom(m.binlog_retention_headroom_seconds)
        if m.source_reconnects > self._reconnects_seen:
            self._recorder.reconnected(m.source_reconnects - self._reconnects_seen)
            self._reconnects_seen = m.source_reconnects

    def caught_up(self, source_time: float) -> None:
        """Everything up to ``source_time`` is committed (the lag's reference)."""
        with self._lock:
            self._metrics = replace(self._metrics, source_time=source_time)
        self._recorder.caught_up(source_time)

    def update(self, **changes: object) -> None:
        """Set fields of the snapshot (``state``, the resume point at start, ...)."""
        with self._lock:
            self._metrics = replace(self._metrics, **changes)  # type: ignore[arg-type]  # the RuntimeMetrics fields, named by the caller

    def committed(self, report: CommitReport) -> None:
        """A batch of changes landed."""
        with self._lock:
            metrics = self._metrics
            self._metrics = replace(
                metrics,
                events_total=metrics.events_total + report.events,
                rows_total=metrics.rows_total + report.rows,
                batches_total=metrics.batches_total + 1,
                last_batch_seq=report.batch_seq,
                last_position=str(report.resume),
                last_commit_at=time.time(),
            )

    def idle_checkpoint(self, report: CommitReport) -> None:
        """An empty commit moved the checkpoint to an idle server's heartbeat."""
        with self._lock:
            metrics = self._metrics
            self._metrics = replace(
                metrics,
                batches_total=metrics.batches_total + 1,
                idle_checkpoints=metrics.idle_checkpoints + 1,
                last_batch_seq=report.batch_seq,
                last_position=str(report.resume),
                last_commit_at=time.time(),
            )

    def commit_failed(self) -> None:
        """A commit attempt failed (it is retried)."""
        self.update(commit_failures=self._metrics.commit_failures + 1)

    def log_rates(self, rates: Rates, source: Source | None, epoch: int | None) -> None:
        """Set the rates of the interval that ``rates`` counted, and log the figures."""
        elapsed = max(1e-9, time.monotonic() - rates.at)
        self.update(events_per_second=rates.events / elapsed, rows_per_second=rates.rows / elapsed)
        m = self.live(source)
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
                "epoch": epoch,
                "batch_seq": m.last_batch_seq,
                "lag_seconds": None if m.lag_seconds is None else round(m.lag_seconds, 3),
                "rows_per_second": round(m.rows_per_second, 1),
                "events_per_second": round(m.events_per_second, 1),
                "buffer_fill": round(m.buffer_fill, 4),
                "reconnects": m.source_reconnects,
            },
        )
