"""Downstream Spark work on the change log: sessions, current-state mirrors, daily history.

Plain PySpark DataFrame API and Spark SQL that Apache Spark with Delta runs as well as the
embedded Sail engine; nothing here imports Dagster. Both faces (``dagster_defs``,
``cdc_airflow``) call :class:`DestinationMirrors`. See docs/spark.md.
"""

from cdc_platform.spark.history import DailyTableStats, daily_change_stats, mirror_as_of
from cdc_platform.spark.locations import mirror_root, mirror_tables, mirror_uri
from cdc_platform.spark.mirror import apply_changes
from cdc_platform.spark.mirror_result import MirrorResult
from cdc_platform.spark.mirror_state import MirrorState, read_state
from cdc_platform.spark.mirrors import AppliedMirror, DailyHistory, DestinationMirrors
from cdc_platform.spark.session import SparkSessionFactory
from cdc_platform.spark.target import MirrorTarget

__all__ = [
    "AppliedMirror",
    "DailyHistory",
    "DailyTableStats",
    "DestinationMirrors",
    "MirrorResult",
    "MirrorState",
    "MirrorTarget",
    "SparkSessionFactory",
    "apply_changes",
    "daily_change_stats",
    "mirror_as_of",
    "mirror_root",
    "mirror_tables",
    "mirror_uri",
    "read_state",
]
