"""The reconcile timetable's due times are fixed points: Airflow recomputes a DAG's next run at
every parse of its file (about every 30 s), at a later ``now`` each time, so a next run that
depends on ``now`` moves ahead at every parse and is never reached (pure logic: the clock is
the test's)."""

from __future__ import annotations

from datetime import timedelta

import pendulum
import pytest
from airflow.timetables.base import DagRunInfo, DataInterval, TimeRestriction
from pendulum import DateTime

from cdc_airflow.timetables import RandomIntervalTimetable

pytestmark = pytest.mark.unit

START = pendulum.datetime(2026, 1, 1, tz="UTC")
"""A start date well before the test's clock, as ``dagster.history_start_date`` is."""
PARSE = timedelta(seconds=30)
"""Airflow's default ``[dag_processor] min_file_process_interval``."""


class Clock:
    """``pendulum.now`` under the test's control."""

    def __init__(self, moment: DateTime) -> None:
        self.moment = moment

    def now(self, tz: object = None) -> DateTime:
        return self.moment


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock(pendulum.datetime(2026, 11, 26, 9, 7, 13, tz="UTC"))
    monkeypatch.setattr(pendulum, "now", fake.now)
    return fake


def _next(
    timetable: RandomIntervalTimetable, last: DataInterval | None, *, catchup: bool = False
) -> DagRunInfo:
    info = timetable.next_dagrun_info(
        last_automated_data_interval=last,
        restriction=TimeRestriction(earliest=START, latest=None, catchup=catchup),
    )
    assert info is not None
    return info


def _parse_until_due(
    timetable: RandomIntervalTimetable, last: DataInterval | None, clock: Clock
) -> DagRunInfo:
    """Ask as the DAG processor does, every 30 s, until the clock reaches the due time; the
    answer must not change on the way."""
    first = _next(timetable, last)
    while clock.moment < first.run_after:
        clock.moment += PARSE
        assert _next(timetable, last).run_after == first.run_after, (
            f"asked again at {clock.moment}, the due time moved"
        )
    return first


def test_the_first_run_stays_due_at_the_same_time_as_time_passes(clock: Clock) -> None:
    timetable = RandomIntervalTimetable(15, 30)
    for _ in range(6):  # the DAG first parsed at six moments 7 minutes apart
        asked = clock.moment
        first = _parse_until_due(timetable, None, clock)
        assert first.run_after - asked <= timedelta(minutes=30)
        clock.moment = asked + timedelta(minutes=7)


def test_each_next_run_stays_put_and_comes_15_to_30_minutes_after_the_previous(
    clock: Clock,
) -> None:
    timetable = RandomIntervalTimetable(15, 30)
    last = _parse_until_due(timetable, None, clock).data_interval
    gaps = set()
    for _ in range(12):
        info = _parse_until_due(timetable, last, clock)
        gap = info.run_after - last.end
        assert timedelta(minutes=15) <= gap <= timedelta(minutes=30)
        gaps.add(gap)
        last = info.data_interval
    assert len(gaps) > 6, "the interval varies from run to run"


def test_a_due_run_that_a_parse_sees_before_the_scheduler_creates_it_is_kept(
    clock: Clock,
) -> None:
    timetable = RandomIntervalTimetable(15, 30)
    last = _parse_until_due(timetable, None, clock).data_interval
    due = _next(timetable, last).run_after
    clock.moment = due + timedelta(seconds=5)  # due, not yet created: a parse comes first
    assert _next(timetable, last).run_after == due


def test_after_an_outage_one_run_makes_up_and_the_schedule_goes_on(clock: Clock) -> None:
    timetable = RandomIntervalTimetable(15, 30)
    last = _parse_until_due(timetable, None, clock).data_interval
    clock.moment += timedelta(hours=5)
    makeup = _next(timetable, last)
    assert clock.moment - timedelta(minutes=30) <= makeup.run_after <= clock.moment
    following = _next(timetable, makeup.data_interval).run_after - makeup.run_after
    assert timedelta(minutes=15) <= following <= timedelta(minutes=30)


def test_with_catch_up_every_point_from_the_start_date_comes_in_order(clock: Clock) -> None:
    timetable = RandomIntervalTimetable(15, 30)
    info = _next(timetable, None, catchup=True)
    assert START <= info.run_after <= START + timedelta(minutes=30)
    for _ in range(20):
        following = _next(timetable, info.data_interval, catchup=True)
        assert timedelta(minutes=15) <= following.run_after - info.run_after
        assert following.run_after - info.run_after <= timedelta(minutes=30)
        info = following


def test_two_keys_have_different_schedules_and_a_key_survives_serialization(
    clock: Clock,
) -> None:
    one = RandomIntervalTimetable(15, 30, key="cdc_shop_reconcile")
    other = RandomIntervalTimetable(15, 30, key="cdc_billing_reconcile")
    assert _next(one, None).run_after != _next(other, None).run_after
    rebuilt = RandomIntervalTimetable.deserialize(one.serialize())
    assert rebuilt.serialize() == one.serialize()
    assert _next(rebuilt, None) == _next(one, None)
