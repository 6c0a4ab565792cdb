"""Publishing to a state store without ever blocking the caller."""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any

from cdc_platform.errors import CdcError
from cdc_platform.watch.store import StateStore

__all__ = ["StatePublisher"]

log = logging.getLogger("cdc_platform.watch")


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
