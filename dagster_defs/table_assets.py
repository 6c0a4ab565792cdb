"""One asset per mirrored table: ``cdc/<destination>/<db>/<table>``, each on its change log.

A destination's tables are one subsettable multi-asset (one Spark session per run, any subset
of tables). Its specs come from the destination's
:class:`~cdc_platform.coordination.table_catalog.Catalog` (the source's captured tables and
the change log's), so they carry the source column types as ``dagster/column_schema`` before
anything ran.

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

from dagster import (
    AssetExecutionContext,
    AssetKey,
    AssetOut,
    AssetsDefinition,
    AssetSpec,
    DagsterInvalidDefinitionError,
    DataVersion,
    Failure,
    MaterializeResult,
    MetadataValue,
    multi_asset,
)

from cdc_platform.config import ConfigSet
from cdc_platform.coordination.table_catalog import Catalog, CatalogTable
from cdc_platform.spark import AppliedMirror
from dagster_defs.check_carry import carry_reconciled
from dagster_defs.freshness import freshness_policy
from dagster_defs.io_manager import MIRROR_IO_MANAGER
from dagster_defs.names import identifier, unique_identifiers
from dagster_defs.resources import CdcResource, SparkResource, mirror_location
from dagster_defs.translator import (
    DEFAULT_TRANSLATOR,
    CdcTableProps,
    CdcTranslator,
    column_schema,
)

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


def op_name(prefix: str, destination: str) -> str:
    """A valid, readable op name for ``destination`` (any directory name; distinct names
    never share one)."""
    return f"{prefix}_{identifier(destination)}"


def table_outs(
    specs: Sequence[AssetSpec],
    tables: Sequence[CatalogTable],
    io_manager_key: str = MIRROR_IO_MANAGER,
) -> dict[str, AssetOut]:
    """The specs as multi-asset outputs, named by :func:`~dagster_defs.names.identifier` of
    ``db``, ``table`` (Dagster would derive names from the keys, and refuse most odd ones).
    Their deps go to the multi-asset's ``deps`` (an output cannot carry them). None is
    required: a run of a subset yields only the selected tables (a required output that is not
    yielded fails the step, whatever the selection)."""
    names = unique_identifiers([(t.db, t.table) for t in tables])
    return {
        name: AssetOut.from_spec(
            spec.replace_attributes(deps=[]), is_required=False, io_manager_key=io_manager_key
        )
        for name, spec in zip(names, specs, strict=True)
    }


def _spec(
    configset: ConfigSet, catalog: Catalog, table: CatalogTable, translator: CdcTranslator
) -> AssetSpec:
    destination = catalog.destination
    uri = mirror_location(configset, destination, table.db, table.table)
    spec = translator.get_asset_spec(CdcTableProps(destination, table, uri, catalog.source_kind))
    key = translator.table_key(destination, table.db, table.table)
    if spec.key != key:
        raise DagsterInvalidDefinitionError(
            f"get_asset_spec changed the key of {table.name} to {spec.key.to_user_string()}; "
            "rename mirrors through CdcTranslator.key_prefix or table_key"
        )
    if spec.freshness_policy is None:
        budget = configset.destinations[destination].config.lag_budget_seconds
        spec = spec.replace_attributes(freshness_policy=freshness_policy(budget))
    return spec


def _result(key: AssetKey, table: CatalogTable, applied: AppliedMirror) -> MaterializeResult[None]:
    result = applied.result
    meta = result.metadata()
    return MaterializeResult(
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
            CHANGE_LOG_VERSION: -1
            if result.change_log_version is None
            else result.change_log_version,
            "seconds": float(meta["seconds"] or 0.0),
            **({"dropped": result.dropped} if result.dropped else {}),
            "rereading": applied.held,
        },
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
    specs = [_spec(configset, catalog, t, translator) for t in catalog.tables]
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
        context: AssetExecutionContext, platform: CdcResource, spark: SparkResource
    ) -> Iterator[MaterializeResult[None]]:
        context.instance.add_run_tags(context.run.run_id, {MIRROR_TAG: destination})
        selected = {
            (t.db, t.table): (k, t) for k, t in by_key.items() if k in context.selected_asset_keys
        }
        # A full run also applies tables the change log gained since the definitions loaded.
        without_table: list[str] = []
        for applied in platform.apply_mirrors(
            spark.session(),
            destination,
            list(selected),
            with_new_tables=len(selected) == len(by_key),
        ):
            if (applied.db, applied.table) not in selected:
                context.log.info(
                    f"{applied.db}.{applied.table}: new in the change log, mirrored "
                    f"({applied.result.mode}, {applied.result.mirror_rows} rows); its asset "
                    "appears on the next reload"
                )
                continue
            key, table = selected[(applied.db, applied.table)]
            context.log.info(f"{table.name}: {applied.result.metadata()}")
            if applied.result.mirror_version is None and applied.result.dropped is None:
                without_table.append(table.name)  # nothing to read: never reported as done
                continue
            yield _result(key, table, applied)
            carry_reconciled(context, key)  # Dagster counts checks of the newest only
        if without_table:
            raise Failure(
                description=(
                    f"no mirror table yet for {', '.join(without_table)}: the change log holds "
                    "no row and no definition of it (a destination started with `start: "
                    "latest` and no change since?). Its mirror appears with its first change; "
                    "to copy its rows now: cdc-platform snapshot --request --table <db.table>"
                ),
                allow_retries=False,
            )

    return mirrors
