"""``RandomIntervalTimetable``: each run a random 15-30 minutes (``reconcile.interval_minutes``)
after the previous one, as the Dagster face's ``reconcile_sensor`` sensor does.

Airflow recomputes a DAG's next run at every parse of its file (about every 30 s) and after
each run, so the due times must not depend on the moment it asks: a next run of "now plus a
random interval" moves ahead at every parse and never comes. The runs are fixed points in
time instead, the same for every process that asks: the n-th is at ``n`` periods of the mean
interval (``(min + max) / 2``) from a phase set by ``key``, moved by a jitter of up to a
quarter of ``max - min`` either way, drawn from a hash of ``key`` and ``n``. Two neighbours
are therefore ``min`` to ``max`` apart, a different gap each time, and destinations with
different keys (their DAG ids) list their sources at different moments.

Without catch-up, as Airflow's cron timetables do: the next point after the last run, or
the latest point already passed if that is later (one run makes up for an outage; a point a
parse sees due before the scheduler created its run is kept, not skipped). A DAG with no run
yet begins at the next point, or at a point passed less than a quarter of the minimum
interval ago. Registered by the provider's plugin (:mod:`cdc_airflow.plugin`) so the
scheduler can rebuild it.
"""

from __future__ import annotations

import hashlib
import math
from datetime import timedelta
from typing import Any

import pendulum
from airflow.timetables.base import DagRunInfo, DataInterval, TimeRestriction, Timetable
from pendulum import DateTime

__all__ = ["RandomIntervalTimetable"]

_EPOCH = pendulum.datetime(2000, 1, 1, tz="UTC")
"""Where the points are counted from (any fixed instant)."""


def _unit(*parts: object) -> float:
    """A number in [0, 1) fixed by ``parts`` (the same in every process, unlike ``hash``)."""
    digest = hashlib.sha256("\x1f".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


class RandomIntervalTimetable(Timetable):
    """Runs ``minimum_minutes`` to ``maximum_minutes`` apart at fixed, jittered points."""

    def __init__(
        self, minimum_minutes: float = 15.0, maximum_minutes: float = 30.0, key: str = ""
    ) -> None:
        if not 0 < minimum_minutes <= maximum_minutes:
            raise ValueError("need 0 < minimum_minutes <= maximum_minutes")
        self.minimum_minutes = minimum_minutes
        self.maximum_minutes = maximum_minutes
        self.key = key
        self.description = f"every {minimum_minutes:g}-{maximum_minutes:g} min, at random"
        self._period = 30.0 * (minimum_minutes + maximum_minutes)  # seconds: the mean gap
        self._jitter = 15.0 * (maximum_minutes - minimum_minutes)  # seconds either way
        self._phase = self._period * _unit(key, "phase")

    @property
    def summary(self) -> str:
        """What the UI shows as the schedule."""
        return f"random {self.minimum_minutes:g}-{self.maximum_minutes:g} min"

    def point(self, number: int) -> DateTime:
        """The ``number``-th run time (consecutive ones are min to max minutes apart)."""
        shift = (2.0 * _unit(self.key, number) - 1.0) * self._jitter
        return _EPOCH + timedelta(seconds=self._phase + number * self._period + shift)

    def _number_near(self, moment: DateTime) -> int:
        return math.floor(((moment - _EPOCH).total_seconds() - self._phase) / self._period)

    def point_after(self, moment: DateTime) -> DateTime:
        """The first run time strictly after ``moment``."""
        number = self._number_near(moment) - 1  # a point is within half a period of its slot
        while self.point(number) <= moment:
            number += 1
        return self.point(number)

    def point_at_or_before(self, moment: DateTime) -> DateTime:
        """The last run time at or before ``moment``."""
        number = self._number_near(moment) + 1
        while self.point(number) > moment:
            number -= 1
        return self.point(number)

    def infer_manual_data_interval(self, *, run_after: DateTime) -> DataInterval:
        """A manual run covers the instant it was triggered."""
        return DataInterval.exact(run_after)

    def next_dagrun_info(
        self,
        *,
        last_automated_data_interval: DataInterval | None,
        restriction: TimeRestriction,
    ) -> DagRunInfo | None:
        """The next fixed point (see the module docstring for the rules without catch-up)."""
        earliest = restriction.earliest
        if last_automated_data_interval is not None:
            following = self.point_after(last_automated_data_interval.end)
        elif earliest is not None:
            following = self.point_after(earliest - timedelta(microseconds=1))
        else:
            return None
        if not restriction.catchup:  # runs missed while off are not made up for, but one
            now = pendulum.now("UTC")
            passed = self.point_at_or_before(now)
            grace = timedelta(minutes=self.minimum_minutes / 4)
            if last_automated_data_interval is not None or now - passed <= grace:
                following = max(following, passed)
            else:
                following = max(following, self.point_after(now))
        if restriction.latest is not None and following > restriction.latest:
            return None
        return DagRunInfo.exact(following)

    def serialize(self) -> dict[str, Any]:
        """What the scheduler stores."""
        return {
            "minimum_minutes": self.minimum_minutes,
            "maximum_minutes": self.maximum_minutes,
            "key": self.key,
        }

    @classmethod
    def deserialize(cls, data: dict[str, Any]) -> Timetable:
        """Rebuild from :meth:`serialize` (a DAG stored before ``key`` existed has none)."""
        return cls(
            float(data["minimum_minutes"]), float(data["maximum_minutes"]), str(data.get("key", ""))
        )
