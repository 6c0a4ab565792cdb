"""Time as the lease, the state watch and the id watch see it; tests inject a fake one."""

from __future__ import annotations

import threading
import time
from typing import Protocol

__all__ = ["SYSTEM_CLOCK", "Clock", "SystemClock"]


class Clock(Protocol):
    """Time as the lease sees it; tests inject a fake one so nothing really sleeps."""

    def monotonic(self) -> float:
        """Seconds on a clock that never jumps (validity deadlines, delays)."""
        ...

    def time(self) -> float:
        """Wall-clock seconds since the Unix epoch (only for display, never for validity)."""
        ...

    def sleep(self, seconds: float, wake: threading.Event | None = None) -> bool:
        """Wait up to ``seconds``; return True early when ``wake`` is set."""
        ...


class SystemClock:
    """The real clocks."""

    def monotonic(self) -> float:
        """``time.monotonic()``."""
        return time.monotonic()

    def time(self) -> float:
        """``time.time()``."""
        return time.time()

    def sleep(self, seconds: float, wake: threading.Event | None = None) -> bool:
        """Sleep, or wait on ``wake``."""
        if seconds <= 0:
            return wake is not None and wake.is_set()
        if wake is None:
            time.sleep(seconds)
            return False
        return wake.wait(seconds)


SYSTEM_CLOCK: Clock = SystemClock()
