"""The decision loop of `cdc-platform serve`: desired destinations vs the running ones.

Each :meth:`ServeMonitor.scan` loads the conf directory, asks the engine diff
(:func:`~cdc_platform.config.monitor.diff_destinations`, the same one the Dagster sensor uses)
what changed, and drives a :class:`DestinationRunner`: start, reload (stop, then start with the
new config), stop. What cannot be done now is remembered and retried at the next scan: a stop
that did not finish in time, a reload waiting for that stop, a destination whose run ended on
its own. An invalid file is reported once per distinct error and the running destination keeps
its last good config. It holds no threads and never sleeps, so tests drive it with a fake
runner; :mod:`.serve` gives it real threads, file-system events and a timer.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from cdc_platform.config.loader import PLATFORM_FILE, ConfigSet, Destination
from cdc_platform.config.monitor import diff_destinations
from cdc_platform.errors import ConfigError

__all__ = ["DestinationRunner", "ScanResult", "ServeMonitor", "platform_file_hash"]

log = logging.getLogger("cdc_platform.serve")


class DestinationRunner(Protocol):
    """Runs destinations (one thread each in `serve`; a fake in unit tests)."""

    def start(self, config: ConfigSet, destination: Destination) -> None:
        """Start the destination; it must not be running."""

    def stop(self, name: str) -> bool:
        """Stop it after its in-flight commit; True once it is not running any more."""

    def running(self) -> set[str]:
        """Names whose run has not ended yet."""

    def ended(self, name: str) -> str | None:
        """Why a destination's run ended on its own (None while running or never started);
        forgets the run, so it is reported once."""


@dataclass
class ScanResult:
    """What one scan did, for logs and tests."""

    started: list[str] = field(default_factory=list)
    reloaded: list[str] = field(default_factory=list)
    stopped: list[str] = field(default_factory=list)
    restarted: list[str] = field(default_factory=list)
    stop_pending: list[str] = field(default_factory=list)
    """Stops (or reloads) that did not finish; retried at the next scan."""
    invalid: dict[str, str] = field(default_factory=dict)
    platform_error: str | None = None
    platform_changed: bool = False

    @property
    def acted(self) -> bool:
        """True when anything was started, reloaded, stopped or restarted."""
        return bool(self.started or self.reloaded or self.stopped or self.restarted)


def platform_file_hash(conf_dir: Path) -> str | None:
    """sha256 of platform.yaml, or None when it does not exist (defaults apply)."""
    try:
        return hashlib.sha256((conf_dir / PLATFORM_FILE).read_bytes()).hexdigest()
    except FileNotFoundError:
        return None


class ServeMonitor:
    """Reconciles the running destinations with the conf directory, one scan at a time."""

    def __init__(
        self,
        load: Callable[[], ConfigSet],
        runner: DestinationRunner,
        *,
        platform_hash: Callable[[], str | None] = lambda: None,
    ) -> None:
        self._load = load
        self._runner = runner
        self._platform_hash = platform_hash
        self._started_platform = platform_hash()
        self._reported_platform: str | None = self._started_platform
        self._seen: dict[str, str] = {}
        self._pending: dict[str, str] = {}
        """name -> "stop" or "reload": stopping did not finish yet."""
        self._reported_invalid: dict[str, str] = {}

    @property
    def seen(self) -> dict[str, str]:
        """Name -> content hash of every destination that should be running."""
        return dict(self._seen)

    def scan(self) -> ScanResult:
        """Load the conf directory once and act on every difference."""
        result = ScanResult()
        self._check_platform(result)
        try:
            config = self._load()
        except ConfigError as exc:
            # Nothing can be judged without the platform file: keep everything as it is.
            result.platform_error = str(exc)
            log.error("configuration not loaded, destinations unchanged: %s", exc)
            return result
        changes = diff_destinations(self._seen, config)
        for name in changes.stop:
            self._pending[name] = "stop"
        for name in changes.reload:
            self._pending[name] = "reload"
        for name in changes.start:
            if name in self._pending:  # removed, then back before its stop finished
                self._pending[name] = "reload"
        self._seen = changes.seen
        self._finish_stops(config, result)
        for name in changes.start:
            if name not in self._pending and name not in self._runner.running():
                self._runner.start(config, config.destinations[name])
                result.started.append(name)
        self._restart_ended(config, result)
        self._report_invalid(changes.invalid, result)
        return result

    def stop_all(self) -> list[str]:
        """Stop every destination (SIGTERM); returns those that did not stop in time."""
        for name in sorted(self._runner.running()):
            self._pending[name] = "stop"
        self._seen = {}
        left = []
        for name in sorted(self._pending):
            if self._runner.stop(name):
                del self._pending[name]
            else:
                left.append(name)
        return left

    # -- steps -----------------------------------------------------------------------------------

    def _finish_stops(self, config: ConfigSet, result: ScanResult) -> None:
        for name, action in sorted(self._pending.items()):
            if not self._runner.stop(name):
                log.warning("%s: not stopped yet (in-flight commit); retrying next scan", name)
                result.stop_pending.append(name)
                continue
            del self._pending[name]
            self._runner.ended(name)  # a requested stop is not an unexpected end
            if action == "reload" and name in self._seen and name in config.destinations:
                self._runner.start(config, config.destinations[name])
                result.reloaded.append(name)
                log.info("%s: reloaded with its new configuration", name)
            else:
                result.stopped.append(name)
                log.info("%s: stopped (removed or disabled)", name)

    def _restart_ended(self, config: ConfigSet, result: ScanResult) -> None:
        """A destination whose run ended on its own (a terminal error) starts again here, once
        per scan interval, like the Dagster running monitor."""
        running = self._runner.running()
        for name in sorted(self._seen):
            if name in self._pending or name in running:
                continue
            why = self._runner.ended(name)
            if why is None or name not in config.destinations:
                continue
            log.warning("%s: its run ended (%s); starting it again", name, why)
            self._runner.start(config, config.destinations[name])
            result.restarted.append(name)

    def _report_invalid(self, invalid: Mapping[str, ConfigError], result: ScanResult) -> None:
        for name, error in invalid.items():
            message = str(error)
            result.invalid[name] = message
            if self._reported_invalid.get(name) != message:
                state = "keeps its last good config" if name in self._seen else "not started"
                log.error("destination %s %s: %s", name, state, message)
        for name in set(self._reported_invalid) - set(invalid):
            log.info("destination %s: its configuration is valid again", name)
        self._reported_invalid = {name: str(error) for name, error in invalid.items()}

    def _check_platform(self, result: ScanResult) -> None:
        current = self._platform_hash()
        if current == self._reported_platform:
            return
        self._reported_platform = current
        if current == self._started_platform:
            log.info("platform.yaml is back to the content this process started with")
            return
        result.platform_changed = True
        log.warning(
            "platform.yaml changed: lease, lake and watch settings apply only to a new process; "
            "restart `cdc-platform serve` to use them"
        )
