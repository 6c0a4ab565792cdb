"""The delays between retries of a transient fault: doubling from a first delay up to a cap.

One schedule for a source that is down when a run starts and for a lease holder whose term
start (its claim, its snapshot side work) hit a transient fault (both use the source's
``reconnect_initial_seconds`` / ``reconnect_max_seconds``), and for a batch commit retried
after a transient sink fault (the runtime's commit retry delays).
"""

from __future__ import annotations

__all__ = ["Backoff"]


class Backoff:
    """Doubling delays from ``initial`` up to ``maximum`` seconds, counting the attempts."""

    def __init__(self, initial: float, maximum: float) -> None:
        self._initial = initial
        self._maximum = maximum
        self._delay = initial
        self.attempts = 0
        """Delays handed out since the last :meth:`reset` (the failed attempts)."""

    def next_delay(self) -> float:
        """The delay before the next attempt (and the one after it doubles)."""
        self.attempts += 1
        delay = self._delay
        self._delay = min(delay * 2, self._maximum)
        return delay

    def reset(self) -> None:
        """An attempt succeeded: the next fault starts from the first delay again."""
        self._delay = self._initial
        self.attempts = 0
