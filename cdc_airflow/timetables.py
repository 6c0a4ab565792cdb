"""``RandomIntervalTimetable``: each run a random 15-30 minutes (``reconcile.interval_minutes``)
after the previous one, as the Dagster face's ``reconcile_sensor`` sensor does.

Airflow asks a timetable for the next run more than once, so the randomness is a function of
the previous run's time (a hash), not of a random generator: the same answer each time it is
asked, a different interval each run. Registered by the provider's plugin
(:mod:`cdc_airflow.plugin`) so the scheduler can rebuild it.
"""

from __future__ import annotations

import hashlib
from datetime import timedelta
from typing import Any

import pendulum
from airflow.timetables.base import DagRunInfo, DataInterval, TimeRestriction, Timetable
from pendulum import DateTime

from cdc_platform.reconcile.schedule import next_interval

__all__ = ["RandomIntervalTimetable"]


def _unit(moment: DateTime) -> float:
    """A number in [0, 1) fixed by ``moment``."""
    digest = hashlib.sha256(moment.isoformat().encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


class RandomIntervalTimetable(Timetable):
    """Runs ``minimum_minutes`` to ``maximum_minutes`` apart, the interval drawn per run."""

    def __init__(self, minimum_minutes: float = 15.0, maximum_minutes: float = 30.0) -> None:
        if not 0 < minimum_minutes <= maximum_minutes:
            raise ValueError("need 0 < minimum_minutes <= maximum_minutes")
        self.minimum_minutes = minimum_minutes
        self.maximum_minutes = maximum_minutes
        self.description = f"every {minimum_minutes:g}-{maximum_minutes:g} min, at random"

    @property
    def summary(self) -> str:
        """What the UI shows as the schedule."""
        return f"random {self.minimum_minutes:g}-{self.maximum_minutes:g} min"

    def interval_after(self, moment: DateTime) -> timedelta:
        """The gap between a run at ``moment`` and the next one."""
        span = (self.minimum_minutes, self.maximum_minutes)
        return timedelta(seconds=next_interval(span, lambda: _unit(moment)))

    def infer_manual_data_interval(self, *, run_after: DateTime) -> DataInterval:
        """A manual run covers the instant it was triggered."""
        return DataInterval.exact(run_after)

    def next_dagrun_info(
        self,
        *,
        last_automated_data_interval: DataInterval | None,
        restriction: TimeRestriction,
    ) -> DagRunInfo | None:
        """One random interval after the previous run (the first: after the start date, or
        after now without catch-up)."""
        if last_automated_data_interval is not None:
            previous = last_automated_data_interval.end
        elif restriction.earliest is not None:
            previous = restriction.earliest
        else:
            return None
        if not restriction.catchup:  # runs missed while off are not made up for
            previous = max(previous, pendulum.now("UTC"))
        following = previous + self.interval_after(previous)
        if restriction.latest is not None and following > restriction.latest:
            return None
        return DagRunInfo.exact(following)

    def serialize(self) -> dict[str, Any]:
        """What the scheduler stores."""
        return {"minimum_minutes": self.minimum_minutes, "maximum_minutes": self.maximum_minutes}

    @classmethod
    def deserialize(cls, data: dict[str, Any]) -> Timetable:
        """Rebuild from :meth:`serialize`."""
        return cls(float(data["minimum_minutes"]), float(data["maximum_minutes"]))
