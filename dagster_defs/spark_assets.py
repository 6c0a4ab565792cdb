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
    DailyPartitionsDefinition,
    MaterializeResult,
    MetadataValue,
    asset,
)

from cdc_platform.backfill.reread import pending_rereads
from cdc_platform.config import ConfigSet
from cdc_platform.spark import (
    apply_changes,
    daily_change_stats,
    mirror_as_of,
    mirror_tables,
    mirror_uri,
)
from dagster_defs.resources import PlatformResource, SparkResource
from dagster_defs.translator import DEFAULT_TRANSLATOR, CdcTranslator, destination_names

__all__ = ["daily_partitions", "spark_assets"]


def daily_partitions(configset: ConfigSet) -> DailyPartitionsDefinition:
    """Daily partitions (UTC) from `dagster.history_start_date`."""
    # end_offset=1: today is a partition too (a partial day, refreshed when rematerialized).
    return DailyPartitionsDefinition(
        start_date=configset.platform.dagster.history_start_date, end_offset=1
    )


def _mirror_asset(destination: str, translator: CdcTranslator) -> AssetsDefinition:
    @asset(
        key=translator.mirrors_key(destination),
        deps=[translator.changes_key(destination)],
        group_name=translator.group_name(destination),
        tags=translator.tags(destination),
        kinds={"spark", "delta"},
        automation_condition=AutomationCondition.eager(),
        description=f"Current state of every table destination {destination} captures, one "
        f"Delta table each under <lake_root>/{destination}/mirror/, merged from the change log "
        "by primary key in seq order (incremental, idempotent).",
        pool=f"cdc-mirror-{destination}",
    )
    def mirrors(
        context: AssetExecutionContext, platform: PlatformResource, spark: SparkResource
    ) -> MaterializeResult[None]:
        configset = platform.load()
        session = spark.session()
        change_log = translator.change_log_uri(configset, destination)
        root = translator.mirror_root(configset, destination)
        options = configset.lake.storage_options
        totals = {"mirror_rows": 0, "rows_inserted": 0, "rows_updated": 0, "rows_deleted": 0}
        lag = 0.0
        per_table: dict[str, dict[str, Any]] = {}
        dropped: dict[str, str] = {}
        # tables whose re-read after DDL is under way: their mirrors wait before that DDL
        rereading = pending_rereads(configset.lake.uri, destination, options)
        for db, table in mirror_tables(session, change_log, options):
            result = apply_changes(
                session,
                change_log,
                root,
                db,
                table,
                storage_options=options,
                held=f"{db}.{table}" in rereading,
            )
            meta = result.metadata()
            per_table[f"{db}.{table}"] = meta
            if result.dropped is not None:
                dropped[f"{db}.{table}"] = result.dropped
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
                # mirrors of tables dropped or renamed at the source: kept, empty, not current
                "dropped_tables": MetadataValue.json(dropped),
                "rereading_tables": MetadataValue.json(sorted(rereading)),
                "mirror_root": MetadataValue.path(root),
            }
        )

    return mirrors


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


def spark_assets(
    configset: ConfigSet, translator: CdcTranslator = DEFAULT_TRANSLATOR
) -> list[AssetsDefinition]:
    """Mirror and daily-history assets for every configured destination."""
    partitions = daily_partitions(configset)
    assets: list[AssetsDefinition] = []
    for name in destination_names(configset):
        assets.append(_mirror_asset(name, translator))
        assets.append(_daily_history_asset(name, partitions, translator))
    return assets
