"""Following a prefix of a state store, and publishing to one without ever blocking the caller."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from cdc_platform.errors import CdcError, TooFarBehindError
from cdc_platform.watch.store import Listing, StateStore, WatchEvent

__all__ = ["StatePublisher", "Watcher"]

log = logging.getLogger("cdc_platform.watch")


class Watcher:
    """Delivers every event under ``prefix`` in index order, re-listing when too far behind.

    ``since`` is the index of the last event the caller already has (a Dagster sensor keeps it
    in its cursor); None starts with a full listing. :meth:`poll` is one synchronous step
    (sensors, tests); :meth:`start` runs it in a thread until :meth:`stop`. Store errors are
    logged and retried; the index only moves past events that were delivered.
    """

    def __init__(
        self,
        store: StateStore,
        prefix: str,
        on_event: Callable[[WatchEvent], None],
        *,
        on_relist: Callable[[Listing], None] | None = None,
        since: int | None = None,
        poll_interval: float = 0.5,
    ) -> None:
        self.store = store
        self.prefix = prefix
        self.on_event = on_event
        self.on_relist = on_relist
        self.last_index = since
        self.poll_interval = poll_interval
        self.relists = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _relist(self) -> None:
        listing = self.store.listing(self.prefix)
        self.relists += 1
        if self.on_relist is not None:
            self.on_relist(listing)
        self.last_index = listing.index

    def poll(self) -> int:
        """Deliver what is new; the number of events delivered (a re-list counts 0)."""
        if self.last_index is None:
            self._relist()
            return 0
        try:
            events = self.store.events(self.prefix, self.last_index)
        except TooFarBehindError as exc:
            log.info("watch %r: %s", self.prefix, exc)
            self._relist()
            return 0
        for event in events:
            self.on_event(event)
            self.last_index = event.index
        if not events:
            # Nothing under our prefix: still move past other keys' events, so the history
            # window does not overtake an idle watcher.
            self.last_index = max(self.last_index, self._index_without_gap())
        return len(events)

    def _index_without_gap(self) -> int:
        assert self.last_index is not None
        current = self.store.index()
        try:  # only skip ahead if nothing for us appeared between the two reads
            if self.store.events(self.prefix, self.last_index, limit=1):
                return self.last_index
        except TooFarBehindError:
            return self.last_index
        return current

    def start(self) -> None:
        """Poll in a background thread."""
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._loop, name=f"cdc-watch-{self.prefix}", daemon=True
        )
        self._thread.start()

    def _loop(self) -> None:
        delay = self.poll_interval
        while not self._stop.is_set():
            try:
                delivered = self.poll()
                delay = self.poll_interval
                if delivered:
                    continue
                self.store.wait(self.last_index or 0, self.poll_interval)
            except CdcError as exc:
                log.warning("watch %r: %s (retrying in %.1f s)", self.prefix, exc, delay)
                self._stop.wait(delay)
                delay = min(delay * 2, 10.0)

    def stop(self) -> None:
        """Stop the thread."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None


class StatePublisher:
    """Writes keys to a state store from its own thread, newest value per key wins.

    The pipeline calls :meth:`publish` on every commit; the thread writes at most every
    ``interval`` seconds per key (immediately when ``urgent``), so a slow or unreachable store
    never slows the pipeline down and never holds more than one pending value per key.
    """

    def __init__(self, store: StateStore, *, interval: float = 1.0) -> None:
        self.store = store
        self.interval = interval
        self._pending: dict[str, tuple[str, int | None, bool]] = {}
        self._lock = threading.Condition()
        self._closed = False
        self._writing = False
        self._last_error = ""
        self._thread = threading.Thread(target=self._loop, name="cdc-state-publisher", daemon=True)
        self._thread.start()

    def publish(
        self,
        key: str,
        value: dict[str, Any] | str,
        *,
        fence: int | None = None,
        urgent: bool = False,
    ) -> None:
        """Queue ``value`` for ``key`` (replacing a pending one)."""
        text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
        with self._lock:
            previous = self._pending.get(key)
            self._pending[key] = (text, fence, urgent or (previous is not None and previous[2]))
            self._lock.notify_all()

    def _loop(self) -> None:
        next_write = 0.0
        while True:
            with self._lock:
                while True:
                    if self._closed and not self._pending:
                        return
                    now = time.monotonic()
                    urgent = any(item[2] for item in self._pending.values())
                    if self._pending and (urgent or self._closed or now >= next_write):
                        break
                    wait = max(0.0, next_write - now) if self._pending else self.interval
                    self._lock.wait(wait)
                batch, self._pending = self._pending, {}
                self._writing = True
            failed: dict[str, tuple[str, int | None, bool]] = {}
            for key, (text, fence, _urgent) in batch.items():
                try:
                    self.store.put(key, text, fence=fence)
                except CdcError as exc:
                    failed[key] = (text, fence, False)  # retried after the interval
                    if str(exc) != self._last_error:
                        self._last_error = str(exc)
                        log.warning("state publish of %s failed (will retry): %s", key, exc)
            with self._lock:
                self._writing = False
                next_write = time.monotonic() + self.interval
                if failed and self._closed:
                    self._pending.clear()  # closing: do not spin on an unreachable store
                for key, item in failed.items():
                    if not self._closed:
                        self._pending.setdefault(key, item)
                self._lock.notify_all()

    def flush(self, timeout: float = 5.0) -> bool:
        """Write what is pending now; True once written, False after ``timeout``."""
        with self._lock:
            for key, (text, fence, _urgent) in list(self._pending.items()):
                self._pending[key] = (text, fence, True)
            self._lock.notify_all()
            return self._lock.wait_for(lambda: not self._pending and not self._writing, timeout)

    def close(self, timeout: float = 5.0) -> None:
        """Write what is pending (up to ``timeout``), then stop."""
        self.flush(timeout)
        with self._lock:
            self._closed = True
            self._lock.notify_all()
        self._thread.join(timeout=timeout)
