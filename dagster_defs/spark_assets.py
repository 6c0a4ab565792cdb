"""Spark assets over each destination's change log: current-state mirrors and daily history.

Thin adapters: every computation is `cdc_platform.spark`; these only pick the paths, call it
and turn its results into Dagster metadata (numeric values, which the UI charts over time).
"""

from datetime import date
from typing import Any

from dagster import (
    AssetExecutionContext,
    AssetsDefinition,
    AutomationCondition,
    ConfigurableResource,
    DailyPartitionsDefinition,
    MaterializeResult,
    MetadataValue,
    asset,
)

from cdc_platform.config import ConfigSet
from cdc_platform.config.models import SparkConfig
from cdc_platform.spark import (
    SparkSessionFactory,
    apply_changes,
    daily_change_stats,
    mirror_as_of,
    mirror_root,
    mirror_tables,
    mirror_uri,
)
from dagster_defs.cdc_job import change_log_key
from dagster_defs.resources import PlatformResource

__all__ = ["SparkResource", "daily_partitions", "spark_assets"]

_factories: dict[str, SparkSessionFactory] = {}


class SparkResource(ConfigurableResource):  # type: ignore[misc]
    """The Spark session chosen by `spark:` in platform.yaml (embedded Sail by default)."""

    conf_dir: str

    def session(self, config: SparkConfig) -> Any:
        """One cached session per Spark configuration and process."""
        key = config.model_dump_json()
        factory = _factories.get(key)
        if factory is None:
            factory = _factories[key] = SparkSessionFactory(config)
        return factory.session()


def daily_partitions(configset: ConfigSet) -> DailyPartitionsDefinition:
    """Daily partitions (UTC) from `dagster.history_start_date`."""
    # end_offset=1: today is a partition too (a partial day, refreshed when rematerialized).
    return DailyPartitionsDefinition(
        start_date=configset.platform.dagster.history_start_date, end_offset=1
    )


def _mirror_asset(destination: str) -> AssetsDefinition:
    @asset(
        key=["cdc", destination, "mirrors"],
        deps=[change_log_key(destination)],
        group_name="cdc",
        kinds={"spark", "delta"},
        automation_condition=AutomationCondition.eager(),
        description=f"Current state of every table destination {destination} captures, one "
        f"Delta table each under <lake_root>/{destination}/mirror/, merged from the change log "
        "by primary key in seq order (incremental, idempotent).",
        pool=f"cdc-mirror-{destination}",
    )
    def mirrors(
        context: AssetExecutionContext, platform: PlatformResource, spark: SparkResource
    ) -> MaterializeResult:
        configset = platform.load()
        session = spark.session(configset.platform.spark)
        change_log = configset.table_uri(destination)
        root = mirror_root(configset.lake_root, destination)
        totals = {"mirror_rows": 0, "rows_inserted": 0, "rows_updated": 0, "rows_deleted": 0}
        lag = 0.0
        per_table: dict[str, dict[str, Any]] = {}
        for db, table in mirror_tables(session, change_log):
            result = apply_changes(session, change_log, root, db, table)
            meta = result.metadata()
            per_table[f"{db}.{table}"] = meta
            for key in totals:
                totals[key] += int(meta[key] or 0)
            lag = max(lag, float(meta["lag_seconds"] or 0.0))
            context.log.info(f"{db}.{table}: {meta}")
        return MaterializeResult(
            metadata={
                **totals,
                "tables": len(per_table),
                "lag_seconds": round(lag, 3),
                "by_table": MetadataValue.json(per_table),
                "mirror_root": MetadataValue.path(root),
            }
        )

    return mirrors


def _daily_history_asset(
    destination: str, partitions: DailyPartitionsDefinition
) -> AssetsDefinition:
    @asset(
        key=["cdc", destination, "daily_history"],
        deps=[change_log_key(destination)],
        partitions_def=partitions,
        group_name="cdc_history",
        kinds={"spark", "delta"},
        description=f"Per UTC day: change counts, bytes and max lag per table of {destination}, "
        f"and each table's state as of the end of that day under "
        f"<lake_root>/{destination}/history/<day>/<db>.<table>.",
    )
    def daily_history(
        context: AssetExecutionContext, platform: PlatformResource, spark: SparkResource
    ) -> MaterializeResult:
        configset = platform.load()
        session = spark.session(configset.platform.spark)
        change_log = configset.table_uri(destination)
        day = date.fromisoformat(context.partition_key)
        stats = daily_change_stats(session, change_log, day)
        history_root = configset.lake_root / destination / "history" / day.isoformat()
        root = mirror_root(configset.lake_root, destination)
        as_of_rows = 0
        for db, table in mirror_tables(session, change_log):
            target = mirror_uri(str(history_root), db, table)
            result = mirror_as_of(session, change_log, db, table, day, target, mirror_root=root)
            as_of_rows += result.mirror_rows
        by_table = {
            f"{s.db}.{s.table}": {
                "inserts": s.inserts,
                "updates": s.updates,
                "deletes": s.deletes,
                "snapshots": s.snapshots,
                "ddl": s.ddl,
                "bytes": s.bytes,
                "max_lag_seconds": s.max_lag_seconds,
            }
            for s in stats
        }
        return MaterializeResult(
            metadata={
                "inserts": sum(s.inserts for s in stats),
                "updates": sum(s.updates for s in stats),
                "deletes": sum(s.deletes for s in stats),
                "ddl": sum(s.ddl for s in stats),
                "rows": sum(s.rows for s in stats),
                "bytes": sum(s.bytes for s in stats),
                "max_lag_seconds": max((s.max_lag_seconds for s in stats), default=0.0),
                "as_of_rows": as_of_rows,
                "by_table": MetadataValue.json(by_table),
                "history_root": MetadataValue.path(str(history_root)),
            }
        )

    return daily_history


def spark_assets(configset: ConfigSet) -> list[AssetsDefinition]:
    """Mirror and daily-history assets for every configured destination."""
    partitions = daily_partitions(configset)
    assets: list[AssetsDefinition] = []
    # Invalid destinations keep their assets, so a typo does not make history disappear.
    for name in sorted({*configset.destinations, *configset.errors}):
        assets.append(_mirror_asset(name))
        assets.append(_daily_history_asset(name, partitions))
    return assets
