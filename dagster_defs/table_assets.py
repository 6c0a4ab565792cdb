"""One asset per mirrored table: ``cdc/<destination>/<db>/<table>``, each on its change log.

A destination's tables are one subsettable multi-asset (one Spark session per run, any subset
of tables). Its specs come from the destination's :class:`~cdc_platform.spark.catalog.Catalog`
(the source's captured tables and the change log's), so they carry the source column types
as ``dagster/column_schema`` before anything ran.

Runs of the ``cdc_mirrors`` job (requested by the ``mirror_refresh`` sensor) apply the change
log to the selected tables and materialize every one of them, also when nothing changed: a
materialization says "current as of now", which the tables' freshness policy (the
destination's ``lag_budget_seconds``) measures. Each carries the table's last applied ``seq``
as its data version, so downstream assets can react to new data only
(``AutomationCondition.data_version_changed()``). A full run (every table selected) also
applies tables the change log gained since the definitions loaded, so their mirrors exist
before the next reload names them.
"""

from collections.abc import Iterator, Sequence
from datetime import timedelta
from typing import Any

from dagster import (
    AssetExecutionContext,
    AssetKey,
    AssetOut,
    AssetsDefinition,
    AssetSpec,
    DataVersion,
    FreshnessPolicy,
    MaterializeResult,
    MetadataValue,
    TableColumn,
    TableColumnConstraints,
    TableSchema,
    multi_asset,
)

from cdc_platform.backfill.reread import pending_rereads
from cdc_platform.config import ConfigSet
from cdc_platform.spark import apply_changes, mirror_tables, mirror_uri
from cdc_platform.spark.catalog import Catalog, CatalogTable
from dagster_defs.names import identifier, unique_identifiers
from dagster_defs.resources import PlatformResource, SparkResource
from dagster_defs.translator import DEFAULT_TRANSLATOR, CdcTranslator

__all__ = [
    "CHANGE_LOG_VERSION",
    "MIRRORS_JOB",
    "MIRROR_TAG",
    "column_schema",
    "freshness_policy",
    "mirror_assets",
    "op_name",
    "table_outs",
]

MIRROR_TAG = "cdc/mirrors"
"""Run tag a mirror step sets on its run: the destination whose mirrors it applied."""
MIRRORS_JOB = "cdc_mirrors"
"""The job every mirror run belongs to (any subset of the mirrors)."""
CHANGE_LOG_VERSION = "change_log_version"
"""Materialization metadata: the change-log Delta version the mirror has applied."""


def freshness_policy(budget_seconds: float) -> FreshnessPolicy:
    """Fail when a mirror was not materialized for the lag budget (Dagster's floor: 60 s);
    warn after half of it (when that is a minute or more)."""
    fail = max(60.0, budget_seconds)
    warn = fail / 2 if fail / 2 >= 60 else None
    return FreshnessPolicy.time_window(
        fail_window=timedelta(seconds=fail),
        warn_window=timedelta(seconds=warn) if warn is not None else None,
    )


def op_name(prefix: str, destination: str) -> str:
    """A valid, readable op name for ``destination`` (any directory name; distinct names
    never share one)."""
    return f"{prefix}_{identifier(destination)}"


def table_outs(specs: Sequence[AssetSpec], tables: Sequence[CatalogTable]) -> dict[str, AssetOut]:
    """The specs as multi-asset outputs, named by :func:`~dagster_defs.names.identifier` of
    ``db``, ``table`` (Dagster would derive names from the keys, and refuse most odd ones).
    Their deps go to the multi-asset's ``deps`` (an output cannot carry them)."""
    names = unique_identifiers([(t.db, t.table) for t in tables])
    return {
        name: AssetOut.from_spec(spec.replace_attributes(deps=[]))
        for name, spec in zip(names, specs, strict=True)
    }


def column_schema(table: CatalogTable) -> TableSchema:
    """The table's source column types as Dagster's table schema."""
    return TableSchema(
        columns=[
            TableColumn(
                name=c.name,
                type=c.type or "unknown",
                constraints=TableColumnConstraints(nullable=c.nullable, unique=False),
                tags={"primary_key": ""} if c.primary_key else {},
            )
            for c in table.columns
        ]
    )


def _spec(
    configset: ConfigSet, destination: str, table: CatalogTable, translator: CdcTranslator
) -> AssetSpec:
    uri = mirror_uri(translator.mirror_root(configset, destination), table.db, table.table)
    metadata: dict[str, Any] = {
        "dagster/uri": uri,
        "dagster/table_name": table.name,
        "found_in": ", ".join(table.found_in),
    }
    if table.columns:
        metadata["dagster/column_schema"] = column_schema(table)
    return AssetSpec(
        key=translator.table_key(destination, table.db, table.table),
        deps=[translator.changes_key(destination)],
        description=f"Current state of {table.name} as captured by destination {destination}: "
        "a Delta table merged from the change log by primary key in seq order.",
        group_name=translator.table_group_name(destination, table.db, table.table),
        tags=translator.table_tags(destination, table.db, table.table),
        kinds={"spark", "delta"},
        metadata=metadata,
        freshness_policy=freshness_policy(
            configset.destinations[destination].config.lag_budget_seconds
        ),
        skippable=True,
    )


def mirror_assets(
    configset: ConfigSet,
    destination: str,
    catalog: Catalog,
    translator: CdcTranslator = DEFAULT_TRANSLATOR,
) -> AssetsDefinition | None:
    """The destination's per-table mirrors (None when no table is known yet)."""
    if not catalog.tables or destination not in configset.destinations:
        return None
    specs = [_spec(configset, destination, t, translator) for t in catalog.tables]
    by_key: dict[AssetKey, CatalogTable] = {
        spec.key: table for spec, table in zip(specs, catalog.tables, strict=True)
    }

    @multi_asset(
        name=op_name("cdc_mirrors", destination),
        outs=table_outs(specs, catalog.tables),
        deps=[translator.changes_key(destination)],
        can_subset=True,
        pool=f"cdc-mirror-{destination}",
    )
    def mirrors(
        context: AssetExecutionContext, platform: PlatformResource, spark: SparkResource
    ) -> Iterator[MaterializeResult[None]]:
        context.instance.add_run_tags(context.run.run_id, {MIRROR_TAG: destination})
        configset = platform.load()
        session = spark.session()
        change_log = translator.change_log_uri(configset, destination)
        root = translator.mirror_root(configset, destination)
        options = configset.lake.storage_options
        selected = [k for k in by_key if k in context.selected_asset_keys]
        # tables whose re-read after DDL is under way: their mirrors wait before that DDL
        rereading = pending_rereads(configset.lake.uri, destination, options)
        for key in selected:
            table = by_key[key]
            held = table.name in rereading
            result = apply_changes(
                session,
                change_log,
                root,
                table.db,
                table.table,
                storage_options=options,
                held=held,
            )
            meta = result.metadata()
            context.log.info(f"{table.name}: {meta}")
            yield MaterializeResult(
                asset_key=key,
                data_version=DataVersion(str(result.last_seq)),
                metadata={
                    "dagster/uri": MetadataValue.path(result.mirror_uri),
                    "dagster/table_name": table.name,
                    "dagster/row_count": result.mirror_rows,
                    **({"dagster/column_schema": column_schema(table)} if table.columns else {}),
                    "rows_inserted": result.rows_inserted,
                    "rows_updated": result.rows_updated,
                    "rows_deleted": result.rows_deleted,
                    "changes": result.changes,
                    "last_seq": result.last_seq,
                    "lag_seconds": float(meta["lag_seconds"] or 0.0),
                    "mode": result.mode,
                    CHANGE_LOG_VERSION: result.change_log_version
                    if result.change_log_version is not None
                    else -1,
                    "seconds": float(meta["seconds"] or 0.0),
                    # dropped or renamed at the source: kept, empty, not current
                    "dropped": result.dropped or "",
                    # a re-read after DDL is under way: the mirror waits before that DDL
                    "rereading": held,
                },
            )
        if len(selected) == len(by_key):
            known = {(t.db, t.table) for t in by_key.values()}
            for db, table_name in mirror_tables(session, change_log, options):
                if (db, table_name) not in known:
                    result = apply_changes(
                        session,
                        change_log,
                        root,
                        db,
                        table_name,
                        storage_options=options,
                        held=f"{db}.{table_name}" in rereading,
                    )
                    context.log.info(
                        f"{db}.{table_name}: new in the change log, mirrored ({result.mode}, "
                        f"{result.mirror_rows} rows); its asset appears on the next reload"
                    )

    return mirrors
