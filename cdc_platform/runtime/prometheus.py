"""The Prometheus endpoint of `cdc-platform run` and `serve`: the engine's figures as metrics.

One :class:`PrometheusMetrics` per process, with its own registry (never prometheus_client's
global one, so tests and `serve` can hold several), one :class:`PrometheusRecorder` per
destination (every series carries the ``destination`` label) and the library's HTTP server.
The engine reports through :class:`~cdc_platform.infra.recorder.MetricsRecorder`; this is the
only module that imports prometheus_client. docs/operations.md describes every series.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Mapping
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from cdc_platform.config.platform import MetricsConfig
from cdc_platform.errors import ConfigError
from cdc_platform.events import Op
from cdc_platform.infra.recorder import MetricsRecorder

__all__ = ["COMMIT_BUCKETS", "PrometheusMetrics", "PrometheusRecorder", "open_metrics"]

log = logging.getLogger("cdc_platform.runtime")

COMMIT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
"""Commit duration buckets: local commits take milliseconds, object storage tenths to
seconds (docs/deploy.md), a retried one tens of seconds."""

_OPS = tuple(str(op) for op in Op)


class PrometheusMetrics:
    """One process's metric families and their HTTP endpoint."""

    def __init__(self, *, clock: Callable[[], float] = time.time) -> None:
        self.registry = CollectorRegistry()
        self._clock = clock
        r = self.registry
        by_destination = ["destination"]
        self.lag = Gauge(
            "cdc_source_lag_seconds",
            "Now minus the source time up to which everything is committed (NaN: not "
            "streaming, e.g. a standby)",
            by_destination,
            registry=r,
        )
        self.rows = Counter(
            "cdc_rows_committed",
            "Rows committed to the change log, by op (c, u, d, r, ddl)",
            ["destination", "op"],
            registry=r,
        )
        self.transactions = Counter(
            "cdc_transactions_committed",
            "Source transactions committed to the change log",
            by_destination,
            registry=r,
        )
        self.commit_duration = Histogram(
            "cdc_commit_duration_seconds",
            "Wall time of one change-log commit (refresh, fencing check, write)",
            by_destination,
            buckets=COMMIT_BUCKETS,
            registry=r,
        )
        self.last_commit = Gauge(
            "cdc_last_commit_timestamp_seconds",
            "When the newest change-log commit landed (epoch seconds)",
            by_destination,
            registry=r,
        )
        self.buffer_fill = Gauge(
            "cdc_buffer_fill_ratio",
            "How full the ring buffer is (0..1, the larger of items and bytes)",
            by_destination,
            registry=r,
        )
        self.lease_held = Gauge(
            "cdc_lease_held",
            "1 while this process holds the destination's lease, else 0",
            by_destination,
            registry=r,
        )
        self.lease_epoch = Gauge(
            "cdc_lease_epoch",
            "Epoch of this process's newest lease term (0: never held)",
            by_destination,
            registry=r,
        )
        self.reconnects = Counter(
            "cdc_source_reconnects",
            "Times the binlog stream was lost and re-established",
            by_destination,
            registry=r,
        )
        self.snapshot = Gauge(
            "cdc_snapshot_progress_ratio",
            "Progress of the running new-table snapshot (0..1; 1 when done or none ran)",
            by_destination,
            registry=r,
        )
        self.xa_prepared_age = Gauge(
            "cdc_xa_prepared_oldest_age_seconds",
            "Seconds the oldest prepared, not yet committed XA transaction held has waited "
            "(0 when none)",
            by_destination,
            registry=r,
        )
        self.retention_headroom = Gauge(
            "cdc_binlog_retention_headroom_seconds",
            "Seconds before the binlog a restart from the checkpoint needs may be purged at the "
            "latest: the server's binlog retention minus the lag (+Inf: kept for ever; NaN: "
            "not known yet)",
            by_destination,
            registry=r,
        )
        self._lock = threading.Lock()
        self._recorders: dict[str, PrometheusRecorder] = {}
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None
        self.host: str | None = None
        self.port: int | None = None

    def recorder(self, destination: str) -> PrometheusRecorder:
        """The destination's recorder (one per destination and process; made on first use)."""
        with self._lock:
            found = self._recorders.get(destination)
            if found is None:
                found = PrometheusRecorder(self, destination, self._clock)
                self._recorders[destination] = found
            return found

    def forget(self, destination: str) -> None:
        """Drop a destination's series (`serve` no longer runs it)."""
        with self._lock:
            if self._recorders.pop(destination, None) is None:
                return
        for family in (
            self.lag,
            self.transactions,
            self.commit_duration,
            self.last_commit,
            self.buffer_fill,
            self.lease_held,
            self.lease_epoch,
            self.reconnects,
            self.snapshot,
            self.xa_prepared_age,
        ):
            family.remove(destination)
        for op in _OPS:
            self.rows.remove(destination, op)

    def serve(self, host: str, port: int) -> int:
        """Serve ``/metrics`` on ``host:port`` (0: a free port) in a daemon thread; returns the
        port. ConfigError when the address cannot be bound."""
        try:
            server, thread = start_http_server(port, addr=host, registry=self.registry)
        except OSError as exc:
            raise ConfigError(
                f"cannot serve metrics on {host}:{port}: {exc.strerror or exc}; choose another "
                "port (metrics.port in platform.yaml, or --metrics-port; 0 picks a free one)"
            ) from None
        self._server, self._thread = server, thread
        self.host, self.port = host, int(server.server_port)
        log.info("serving Prometheus metrics on %s", self.url)
        return self.port

    @property
    def url(self) -> str | None:
        """The endpoint's URL once serving (a wildcard host is shown as this host's name)."""
        if self.port is None or self.host is None:
            return None
        host = self.host
        if host in ("0.0.0.0", "::", ""):  # noqa: S104 - naming the wildcard, not binding it
            import socket  # noqa: PLC0415 (only for a wildcard bind)

            host = socket.gethostname()
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.port}/metrics"

    def close(self) -> None:
        """Stop the HTTP server (idempotent)."""
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None


class PrometheusRecorder(MetricsRecorder):
    """One destination's series in a :class:`PrometheusMetrics`; every series exists from
    the start (counters at 0), so rates and absences are well defined."""

    def __init__(
        self, metrics: PrometheusMetrics, destination: str, clock: Callable[[], float]
    ) -> None:
        self.destination = destination
        self._clock = clock
        self._source_time: float | None = None
        self._held: bool | None = None
        """None until a lease supervisor reports (a run without a lease)."""
        self._rows = {op: metrics.rows.labels(destination, op) for op in _OPS}
        self._transactions = metrics.transactions.labels(destination)
        self._commit = metrics.commit_duration.labels(destination)
        self._last_commit = metrics.last_commit.labels(destination)
        self._fill = metrics.buffer_fill.labels(destination)
        self._held_gauge = metrics.lease_held.labels(destination)
        self._epoch = metrics.lease_epoch.labels(destination)
        self._reconnects = metrics.reconnects.labels(destination)
        self._snapshot = metrics.snapshot.labels(destination)
        self._snapshot.set(1.0)
        self._xa_age = metrics.xa_prepared_age.labels(destination)
        self._headroom = metrics.retention_headroom.labels(destination)
        self._headroom.set(math.nan)
        metrics.lag.labels(destination).set_function(self.lag_seconds)

    def lag_seconds(self) -> float:
        """Now minus the source time up to which everything is committed; NaN before the
        first commit or heartbeat, and while this process does not hold the lease."""
        source_time = self._source_time
        if source_time is None:
            return math.nan
        return max(0.0, self._clock() - source_time)

    def committed(
        self, *, ops: Mapping[str, int], transactions: int, seconds: float, at: float
    ) -> None:
        for op, count in ops.items():
            child = self._rows.get(op)
            if child is not None and count > 0:
                child.inc(count)
        if transactions > 0:
            self._transactions.inc(transactions)
        self._commit.observe(seconds)
        self._last_commit.set(at)

    def caught_up(self, source_time: float) -> None:
        if self._held is not False:  # a late report of a lost term must not revive the lag
            self._source_time = source_time

    def buffer(self, fill_ratio: float) -> None:
        self._fill.set(fill_ratio)

    def reconnected(self, count: int = 1) -> None:
        self._reconnects.inc(count)

    def lease(self, *, held: bool, epoch: int | None) -> None:
        self._held = held
        self._held_gauge.set(1 if held else 0)
        if epoch is not None:
            self._epoch.set(epoch)
        if not held:
            self._source_time = None  # the new holder reports the lag now

    def snapshot(self, progress: float) -> None:
        self._snapshot.set(progress)

    def xa_prepared(self, age_seconds: float | None) -> None:
        self._xa_age.set(age_seconds or 0.0)

    def retention_headroom(self, seconds: float | None) -> None:
        self._headroom.set(math.nan if seconds is None else seconds)


def open_metrics(
    settings: MetricsConfig,
    *,
    port: int | None = None,
    host: str | None = None,
    any_port: bool = False,
) -> PrometheusMetrics | None:
    """A process's endpoint, serving, if ``port`` (a command-line override) or
    ``settings.port`` asks for one; None otherwise. ``any_port``: a free port whatever the
    configured one (a Dagster run: several runs share a machine)."""
    port = port if port is not None else settings.port
    if port is None:
        return None
    if any_port:
        port = 0
    metrics = PrometheusMetrics()
    metrics.serve(host or settings.host, port)
    return metrics
