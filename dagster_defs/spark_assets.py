"""Daily history of each mirrored table (``cdc/shop/orders_daily_history``, named by the
translator), partitioned by UTC day (one subsettable multi-asset per destination, like the
mirrors in ``table_assets``: one Spark pass over a day of the change log serves every selected
table). It reads the change log (the day's figures, the changes up to the day's end) and the
table's mirror (its newest version at or before that point, read ``VERSION AS OF``): both are
its dependencies. ``daily_history_schedule`` (:mod:`dagster_defs.history_schedule`)
materializes each finished day.

Thin adapters: :meth:`CdcResource.daily_history <dagster_defs.resources.CdcResource.daily_history>`
does the work; the body turns its results into Dagster metadata (numeric values, which the UI
charts over time).
"""

from collections.abc import Iterator, Mapping
from datetime import date
from typing import Any

from dagster import (
    AssetExecutionContext,
    AssetIn,
    AssetKey,
    AssetsDefinition,
    AssetSpec,
    DailyPartitionsDefinition,
    MaterializeResult,
    MetadataValue,
    Nothing,
    multi_asset,
)

from cdc_platform.config import ConfigSet
from cdc_platform.coordination.table_catalog import Catalog, CatalogTable
from cdc_platform.spark import DailyHistory
from dagster_defs.resources import CdcResource, SparkResource
from dagster_defs.table_assets import op_name, table_outs
from dagster_defs.translator import DEFAULT_TRANSLATOR, CdcTranslator

__all__ = ["daily_partitions", "history_assets"]


def daily_partitions(configset: ConfigSet) -> DailyPartitionsDefinition:
    """Daily partitions (UTC) from `dagster.history_start_date`."""
    # end_offset=1: today is a partition too (a partial day, refreshed when rematerialized).
    return DailyPartitionsDefinition(
        start_date=configset.platform.dagster.history_start_date, end_offset=1
    )


def _history_spec(
    destination: str,
    table: CatalogTable,
    partitions: DailyPartitionsDefinition,
    translator: CdcTranslator,
) -> AssetSpec:
    return AssetSpec(
        key=translator.table_history_key(destination, table.db, table.table),
        deps=[
            translator.changes_key(destination),
            translator.table_key(destination, table.db, table.table),
        ],
        partitions_def=partitions,
        group_name=translator.history_group_name(destination),
        tags=translator.table_tags(destination, table.db, table.table),
        owners=translator.owners(destination),
        kinds={"spark", "delta"},
        description=f"Per UTC day: change counts, bytes and max lag of `{table.name}` "
        f"({destination}), and its state as of the end of that day under "
        f"`<lake_root>/{destination}/history/<day>/`.\n\n"
        "Materialization metadata: `inserts`, `updates`, `deletes`, `snapshots`, `ddl` (the "
        "day's change-log rows by kind), `rows`, `bytes`, `max_lag_seconds` (capture lag of "
        "the day's slowest change), `as_of_rows` (rows of the table at the end of the day).",
        # its own tables (one per day), not the mirror: the UI must not link them as one
        metadata={"dagster/table_name": f"history.{table.name}"},
    )


def _history_metadata(done: DailyHistory) -> dict[str, Any]:
    """The engine's figures of the day (:meth:`DailyHistory.metadata`), under Dagster's names
    for the table's URI, name and rows."""
    figures = {
        name: value
        for name, value in done.metadata().items()
        if name not in ("day", "uri", "row_count", "last_seq")
    }
    return {
        "dagster/uri": MetadataValue.path(done.result.mirror_uri),
        "dagster/table_name": f"history.{done.db}.{done.table}",
        "dagster/row_count": done.result.mirror_rows,
        **figures,
        "as_of_rows": done.result.mirror_rows,
    }


def _path(key: AssetKey) -> list[str]:
    return list(key.path)


def _history_asset(
    destination: str,
    catalog: Catalog,
    partitions: DailyPartitionsDefinition,
    translator: CdcTranslator,
) -> AssetsDefinition:
    specs = [_history_spec(destination, t, partitions, translator) for t in catalog.tables]
    by_key = {spec.key: table for spec, table in zip(specs, catalog.tables, strict=True)}
    outs = table_outs(specs, catalog.tables)
    reads = {  # each table's history reads the change log and that table's mirror
        name: {dep.asset_key for dep in spec.deps} for name, spec in zip(outs, specs, strict=True)
    }

    # named inputs: Dagster would name them after the keys, and refuse most odd table names
    changes = translator.changes_key(destination)
    ins = {
        f"{name}_mirror": AssetIn(key=key, dagster_type=Nothing)
        for name, keys in reads.items()
        for key in sorted(keys - {changes}, key=_path)
    }

    @multi_asset(
        name=op_name("cdc_daily_history", destination),
        outs=outs,
        ins=ins,
        deps=[changes],
        internal_asset_deps=reads,
        can_subset=True,
        pool=f"cdc-mirror-{destination}",
    )
    def daily_history(
        context: AssetExecutionContext, platform: CdcResource, spark: SparkResource
    ) -> Iterator[MaterializeResult[None]]:
        keys = {(t.db, t.table): k for k, t in by_key.items() if k in context.selected_asset_keys}
        day = date.fromisoformat(context.partition_key)
        for done in platform.daily_history(spark.session(), destination, day, list(keys)):
            yield MaterializeResult(
                asset_key=keys[(done.db, done.table)], metadata=_history_metadata(done)
            )

    return daily_history


def history_assets(
    configset: ConfigSet,
    catalogs: Mapping[str, Catalog],
    translator: CdcTranslator = DEFAULT_TRANSLATOR,
) -> list[AssetsDefinition]:
    """Per valid destination with known tables, the daily history of each table."""
    partitions = daily_partitions(configset)
    return [
        _history_asset(name, catalogs[name], partitions, translator)
        for name in sorted(configset.destinations)
        if name in catalogs and catalogs[name].tables
    ]
