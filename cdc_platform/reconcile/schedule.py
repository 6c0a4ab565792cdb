"""When each destination's next reconciliation is due: a randomized interval per destination.

SOFARegistry's list loop waits a random time between half and all of its interval before
each full list, so that many nodes (here: many destinations) do not list their sources at the
same moment. The Dagster sensor keeps this state in its cursor; the logic lives here, with an
injected random source, so it is tested without clocks or sleeps.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

__all__ = ["DueState", "next_interval"]


def next_interval(
    interval_minutes: tuple[float, float], rand: Callable[[], float] = random.random
) -> float:
    """Seconds until the next run: uniform in [min, max] minutes."""
    low, high = interval_minutes
    return 60.0 * (low + (high - low) * rand())


@dataclass
class DueState:
    """Next due time (epoch seconds) per destination; serialises to a sensor cursor."""

    next_due: dict[str, float] = field(default_factory=dict)

    @classmethod
    def from_cursor(cls, cursor: str | None) -> DueState:
        """Parse a cursor (None or garbage: start fresh, nothing is lost but a wait)."""
        if not cursor:
            return cls()
        try:
            raw = json.loads(cursor)
            return cls({str(k): float(v) for k, v in raw.items()})
        except (ValueError, TypeError, AttributeError):
            return cls()

    def to_cursor(self) -> str:
        """The cursor text."""
        return json.dumps(self.next_due, sort_keys=True)

    def due(
        self,
        destinations: Iterable[str],
        now: float,
        interval_minutes: tuple[float, float],
        rand: Callable[[], float] = random.random,
    ) -> list[str]:
        """Destinations whose time has come. A destination seen for the first time is
        scheduled one random interval ahead (no burst of full lists after a deploy);
        forgotten destinations are dropped."""
        names = set(destinations)
        for gone in set(self.next_due) - names:
            del self.next_due[gone]
        ready = []
        for name in sorted(names):
            if name not in self.next_due:
                self.next_due[name] = now + next_interval(interval_minutes, rand)
            elif now >= self.next_due[name]:
                ready.append(name)
        return ready

    def reschedule(
        self,
        name: str,
        now: float,
        interval_minutes: tuple[float, float],
        rand: Callable[[], float] = random.random,
    ) -> None:
        """Next run of ``name`` one random interval from ``now``."""
        self.next_due[name] = now + next_interval(interval_minutes, rand)
