"""Daily history over each destination's change log (the per-table mirrors are
``table_assets``).

Thin adapters: every computation is `cdc_platform.spark`; these only pick the paths, call it
and turn its results into Dagster metadata (numeric values, which the UI charts over time).
"""

from datetime import date

from dagster import (
    AssetExecutionContext,
    AssetsDefinition,
    DailyPartitionsDefinition,
    MaterializeResult,
    MetadataValue,
    asset,
)

from cdc_platform.config import ConfigSet
from cdc_platform.spark import (
    daily_change_stats,
    mirror_as_of,
    mirror_tables,
    mirror_uri,
)
from dagster_defs.resources import PlatformResource, SparkResource
from dagster_defs.translator import DEFAULT_TRANSLATOR, CdcTranslator, destination_names

__all__ = ["daily_partitions", "history_assets"]


def daily_partitions(configset: ConfigSet) -> DailyPartitionsDefinition:
    """Daily partitions (UTC) from `dagster.history_start_date`."""
    # end_offset=1: today is a partition too (a partial day, refreshed when rematerialized).
    return DailyPartitionsDefinition(
        start_date=configset.platform.dagster.history_start_date, end_offset=1
    )


def _daily_history_asset(
    destination: str, partitions: DailyPartitionsDefinition, translator: CdcTranslator
) -> AssetsDefinition:
    @asset(
        key=translator.history_key(destination),
        deps=[translator.changes_key(destination)],
        partitions_def=partitions,
        group_name=translator.history_group_name(destination),
        tags=translator.tags(destination),
        kinds={"spark", "delta"},
        description=f"Per UTC day: change counts, bytes and max lag per table of {destination}, "
        f"and each table's state as of the end of that day under "
        f"<lake_root>/{destination}/history/<day>/<db>.<table>.",
    )
    def daily_history(
        context: AssetExecutionContext, platform: PlatformResource, spark: SparkResource
    ) -> MaterializeResult[None]:
        configset = platform.load()
        session = spark.session()
        change_log = translator.change_log_uri(configset, destination)
        day = date.fromisoformat(context.partition_key)
        stats = daily_change_stats(session, change_log, day)
        history_root = translator.history_root(configset, destination, day)
        root = translator.mirror_root(configset, destination)
        options = configset.lake.storage_options
        as_of_rows = 0
        for db, table in mirror_tables(session, change_log, options):
            target = mirror_uri(history_root, db, table)
            result = mirror_as_of(
                session,
                change_log,
                db,
                table,
                day,
                target,
                mirror_root=root,
                storage_options=options,
            )
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
                "history_root": MetadataValue.path(history_root),
            }
        )

    return daily_history


def history_assets(
    configset: ConfigSet, translator: CdcTranslator = DEFAULT_TRANSLATOR
) -> list[AssetsDefinition]:
    """The daily-history asset of every configured destination."""
    partitions = daily_partitions(configset)
    return [
        _daily_history_asset(name, partitions, translator) for name in destination_names(configset)
    ]
