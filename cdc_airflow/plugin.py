"""The provider's Airflow plugin: registers :class:`RandomIntervalTimetable`, which the
scheduler must know by name to rebuild a DAG's schedule."""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from cdc_airflow.timetables import RandomIntervalTimetable

__all__ = ["CdcPlugin"]


class CdcPlugin(AirflowPlugin):
    """Timetables of cdc-platform."""

    name = "cdc_platform"
    timetables = [RandomIntervalTimetable]
