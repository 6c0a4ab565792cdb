"""`cdc-platform serve`: every enabled destination of a conf directory in one process.

Each destination runs in its own thread under its own lease, built by
:func:`~cdc_platform.runtime.supervised.supervised_destination` exactly as `cdc-platform run`
builds it, so several serve processes (or `run` processes) share destinations: each streams on
exactly one of them, the others stand by. :class:`~.serve_monitor.ServeMonitor` decides what to
start, reload and stop; it scans when a file-system event arrives (:mod:`.config_watch`), when
SIGHUP asks, and every ``serve.scan_interval_seconds`` as the safety net.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from cdc_platform.config.loader import ConfigSet, Destination, load_config
from cdc_platform.runtime.config_watch import ConfigWatch
from cdc_platform.runtime.serve_monitor import ServeMonitor, platform_file_hash
from cdc_platform.runtime.supervised import supervised_destination
from cdc_platform.runtime.supervisor import LeaseSupervisor

if TYPE_CHECKING:
    from cdc_platform.runtime.prometheus import PrometheusMetrics

__all__ = ["ServeProcess", "ThreadRunner"]

log = logging.getLogger("cdc_platform.serve")

_EVENT_SETTLE_SECONDS = 0.1
"""After the first event, wait this long for the rest of a burst (an editor's save, a copy)."""


@dataclass
class _Running:
    thread: threading.Thread = field(init=False)
    supervisor: LeaseSupervisor | None = None
    stop_reason: str | None = None
    outcome: str | None = None


class ThreadRunner:
    """One thread per destination, each a lease-supervised run."""

    def __init__(
        self,
        *,
        address: str | None,
        metrics_interval_seconds: float = 10.0,
        stop_timeout_seconds: float = 60.0,
        metrics: PrometheusMetrics | None = None,
    ) -> None:
        self._address = address
        self._prometheus = metrics
        self._metrics = metrics_interval_seconds
        self._stop_timeout = stop_timeout_seconds
        self._lock = threading.Lock()
        self._runs: dict[str, _Running] = {}

    def start(self, config: ConfigSet, destination: Destination) -> None:
        """Start a thread that runs the destination until stopped or failed."""
        name = destination.name
        run = _Running()
        run.thread = threading.Thread(
            target=self._main, args=(config, destination, run), name=f"cdc-serve-{name}"
        )
        with self._lock:
            self._runs[name] = run
        log.info("%s: starting (config sha256:%s)", name, destination.content_hash[:12])
        run.thread.start()

    def _main(self, config: ConfigSet, destination: Destination, run: _Running) -> None:
        name = destination.name
        prometheus = self._prometheus
        try:
            with supervised_destination(
                config,
                destination,
                address=self._address,
                metrics_interval_seconds=self._metrics,
                metrics=prometheus,
            ) as supervisor:
                with self._lock:
                    run.supervisor = supervisor
                    reason = run.stop_reason
                if reason is not None:
                    supervisor.request_stop(reason)
                summary = supervisor.run()
            run.outcome = (
                f"{summary.reason}; error: {summary.error}"
                if summary.error is not None
                else summary.reason
            )
            log.info(
                "%s: %s; %d batches, %d rows this run; last batch %d at %s",
                name,
                run.outcome,
                summary.batches,
                summary.rows,
                summary.last_batch_seq,
                summary.resume,
            )
        except Exception as exc:  # a thread must report, never vanish silently
            run.outcome = f"failed: {exc}"
            log.exception("%s: the run failed", name)
        finally:
            if prometheus is not None:
                prometheus.forget(name)  # a reload starts its series afresh

    def request_stop(self, name: str, reason: str) -> None:
        """Ask a destination to stop after its in-flight commit (does not wait)."""
        with self._lock:
            run = self._runs.get(name)
            if run is None:
                return
            run.stop_reason = run.stop_reason or reason
            supervisor = run.supervisor
        if supervisor is not None:
            supervisor.request_stop(reason)

    def stop(self, name: str) -> bool:
        """Request the stop and wait up to the stop timeout; True once the thread ended."""
        self.request_stop(name, "configuration changed or removed")
        with self._lock:
            run = self._runs.get(name)
        if run is None:
            return True
        run.thread.join(timeout=self._stop_timeout)
        if run.thread.is_alive():
            return False
        with self._lock:
            if self._runs.get(name) is run:
                del self._runs[name]
        return True

    def running(self) -> set[str]:
        """Names whose thread is alive."""
        with self._lock:
            return {name for name, run in self._runs.items() if run.thread.is_alive()}

    def ended(self, name: str) -> str | None:
        """Why a thread ended on its own; forgets it."""
        with self._lock:
            run = self._runs.get(name)
            if run is None or run.thread.is_alive():
                return None
            del self._runs[name]
        return run.outcome or "ended"

    def supervisor(self, name: str) -> LeaseSupervisor | None:
        """The destination's supervisor once its thread built it (tests, status)."""
        with self._lock:
            run = self._runs.get(name)
            return run.supervisor if run is not None else None


class ServeProcess:
    """The serve loop: scan on events, on SIGHUP and on a timer; stop all on SIGTERM."""

    def __init__(  # noqa: PLR0913 (the conf directory; the rest keyword-only with defaults)
        self,
        conf_dir: Path,
        *,
        address: str | None = None,
        metrics_interval_seconds: float = 10.0,
        scan_interval_seconds: float | None = None,
        load: Callable[[], ConfigSet] | None = None,
        metrics: PrometheusMetrics | None = None,
    ) -> None:
        self.conf_dir = conf_dir
        self._load = load or (lambda: load_config(conf_dir))
        settings = self._load().platform.serve
        self.scan_interval = scan_interval_seconds or settings.scan_interval_seconds
        self.runner = ThreadRunner(
            address=address,
            metrics_interval_seconds=metrics_interval_seconds,
            stop_timeout_seconds=settings.stop_timeout_seconds,
            metrics=metrics,
        )
        self.monitor = ServeMonitor(
            self._load, self.runner, platform_hash=lambda: platform_file_hash(conf_dir)
        )
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._stop_reason = "stop requested"

    def rescan(self) -> None:
        """Scan now (SIGHUP)."""
        self._wake.set()

    def request_stop(self, reason: str) -> None:
        """Leave the loop and stop every destination after its in-flight commit (SIGTERM)."""
        self._stop_reason = reason
        self._stop.set()
        for name in self.runner.running():
            self.runner.request_stop(name, reason)
        self._wake.set()

    def run(self) -> list[str]:
        """Serve until stopped; returns the destinations that did not stop in time."""
        watch = ConfigWatch(self.conf_dir, self._wake)
        watch.start()
        log.info(
            "serving %s (full scan every %.1f s, file events from %s)",
            self.conf_dir,
            self.scan_interval,
            watch.conf_dir,
        )
        try:
            while not self._stop.is_set():
                try:
                    self.monitor.scan()
                except Exception:  # one bad scan must not end the process; the next retries
                    log.exception("the configuration scan failed; retrying at the next one")
                self._wake.wait(self.scan_interval)
                if self._wake.is_set() and not self._stop.is_set():
                    self._stop.wait(_EVENT_SETTLE_SECONDS)
                self._wake.clear()
        finally:
            watch.stop()
            log.info("%s: stopping every destination after its in-flight commit", self._stop_reason)
            left = self.monitor.stop_all()
        for name in left:
            log.error("%s: did not stop within its stop timeout", name)
        return left
