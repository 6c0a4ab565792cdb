"""Downstream Spark work on the change log: sessions, current-state mirrors, daily history.

Plain PySpark DataFrame API and Spark SQL that Apache Spark with Delta runs as well as the
embedded Sail engine; nothing here imports Dagster (``dagster_defs`` calls these functions).
See docs/spark.md.
"""

from cdc_platform.spark.history import DailyTableStats, daily_change_stats, mirror_as_of
from cdc_platform.spark.locations import mirror_root, mirror_tables, mirror_uri
from cdc_platform.spark.mirror import MirrorResult, apply_changes
from cdc_platform.spark.mirror_state import MirrorState, read_state
from cdc_platform.spark.session import SparkSessionFactory

__all__ = [
    "DailyTableStats",
    "MirrorResult",
    "MirrorState",
    "SparkSessionFactory",
    "apply_changes",
    "daily_change_stats",
    "mirror_as_of",
    "mirror_root",
    "mirror_tables",
    "mirror_uri",
    "read_state",
]
