"""What Airflow finds through the package's entry points, and the reconcile timetable's
arithmetic (pure logic: no servers)."""

from __future__ import annotations

from datetime import timedelta

import pendulum
import pytest
from airflow.plugins_manager import get_timetables_plugins
from airflow.providers_manager import ProvidersManager
from airflow.sdk.providers_manager_runtime import ProvidersManagerTaskRuntime
from airflow.timetables.base import DataInterval, TimeRestriction

from cdc_airflow.timetables import RandomIntervalTimetable

pytestmark = pytest.mark.unit


def test_provider_and_connection_type_are_registered() -> None:
    assert "cdc-platform" in ProvidersManager().providers
    hook = ProvidersManagerTaskRuntime().hooks["cdc_platform"]
    assert hook is not None
    assert hook.hook_class_name == "cdc_airflow.hooks.CdcHook"


def test_timetable_is_registered_by_the_plugin() -> None:
    assert RandomIntervalTimetable in get_timetables_plugins().values()


def test_random_interval_is_within_bounds_stable_and_varies() -> None:
    timetable = RandomIntervalTimetable(15, 30)
    start = pendulum.datetime(2026, 11, 26, tz="UTC")
    restriction = TimeRestriction(earliest=start, latest=None, catchup=True)
    previous: DataInterval | None = None
    gaps = []
    moment = start
    for number in range(21):
        info = timetable.next_dagrun_info(
            last_automated_data_interval=previous, restriction=restriction
        )
        assert info is not None
        again = timetable.next_dagrun_info(
            last_automated_data_interval=previous, restriction=restriction
        )
        assert again == info, "asked twice, the same answer"
        gap = info.data_interval.end - moment
        if number == 0:  # the first fixed point at or after the start date
            assert timedelta(0) <= gap <= timedelta(minutes=30)
        else:
            assert timedelta(minutes=15) <= gap <= timedelta(minutes=30)
            gaps.append(gap)
        moment = info.data_interval.end
        previous = info.data_interval
    assert len(set(gaps)) > 10
    rebuilt = RandomIntervalTimetable.deserialize(timetable.serialize())
    assert rebuilt.serialize() == timetable.serialize()
