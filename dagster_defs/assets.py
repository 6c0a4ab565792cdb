"""Assets: each destination's change-log table, materialized by its long-lived run.

The change log is written by the ``cdc_destination`` job's run, which the monitors start and
keep running; it is not materialized on request, so Dagster shows it as an external asset.
Its page says so (the description, ``materialized_by``), carries the table's columns as
``dagster/column_schema``, the destination's freshness policy (the run materializes it with
every commit, and every half lag budget while the source is idle) and the
``lag_within_budget`` check, which the run evaluates with each materialization.
"""

from __future__ import annotations

from dagster import (
    AssetSpec,
    FreshnessPolicy,
    TableColumn,
    TableColumnConstraints,
    TableSchema,
)

from cdc_platform.config import ConfigSet
from cdc_platform.sink.schema import CHANGE_LOG_SCHEMA
from dagster_defs.freshness import freshness_policy
from dagster_defs.resources import change_log_uri, destination_root
from dagster_defs.translator import DEFAULT_TRANSLATOR, CdcTranslator, destination_names

__all__ = ["CHANGE_LOG_COLUMNS", "change_log_schema", "change_log_specs"]

CHANGE_LOG_COLUMNS: dict[str, str] = {
    "op": "c / u / d (row insert, update, delete), r (snapshot row), ddl",
    "db": "schema name (partition column); null for DDL without one",
    "table": "table name (partition column); null for DDL not bound to one table",
    "pk": "JSON object of the primary key (null for DDL)",
    "before": "JSON row image before the change (null for inserts and DDL)",
    "after": "JSON row image after the change (null for deletes and DDL)",
    "ddl": "the statement, DDL rows only",
    "columns": "JSON column list of the row's table",
    "binlog_file": "binlog file of the event",
    "binlog_pos": "end position of the binlog event",
    "txn_index": "0-based index of the event in its transaction",
    "gtid": "the transaction's GTID, when the server assigned one",
    "server_id": "originating server id",
    "ts": "binlog timestamp of the transaction (UTC)",
    "seq": "strictly increasing per destination, from 1, no gaps",
    "batch_seq": "the batch (one Delta commit) that wrote the row",
    "epoch": "lease epoch of the writer (fencing token)",
    "resume_position": "binlog resume position, on the last row of each commit",
    "committed_at": "writer's wall clock when the commit was built (UTC)",
}
"""What each change-log column holds (``cdc_platform/sink/schema.py``), as the asset's
column descriptions."""


def change_log_schema() -> TableSchema:
    """The change log's columns as Dagster's table schema."""
    return TableSchema(
        columns=[
            TableColumn(
                name=field.name,
                type=str(field.type),
                description=CHANGE_LOG_COLUMNS.get(field.name),
                constraints=TableColumnConstraints(nullable=field.nullable),
            )
            for field in CHANGE_LOG_SCHEMA
        ]
    )


def change_log_specs(
    configset: ConfigSet, translator: CdcTranslator = DEFAULT_TRANSLATOR
) -> list[AssetSpec]:
    """One asset per configured destination: `cdc/<destination>/changes`.

    Built when the code location loads; the daemon reloads code locations regularly, so a new
    destination's asset appears without a restart (its run starts at once either way).
    """
    return [
        AssetSpec(
            key=translator.changes_key(name),
            description=f"Change log of destination {name}: one row per row change or DDL, "
            "one Delta commit per batch of whole transactions.\n\n"
            f"Materialized by the job `cdc_destination` (its long-lived run for {name}, "
            "started and kept running by the sensors `config_monitor` and `running_monitor`; "
            "the run's tag `cdc/destination` names it), with every commit and every half lag "
            "budget while the source is idle. It is not materialized on request: to start "
            "or stop the stream, add, edit or remove conf/destinations/" + name + ".",
            group_name=translator.group_name(name),
            tags=translator.tags(name),
            kinds={"delta"},
            freshness_policy=_policy(configset, name),
            metadata={
                "table_uri": _uri(configset, name),
                "dagster/uri": _uri(configset, name),
                "dagster/column_schema": change_log_schema(),
                "materialized_by": f"job cdc_destination, run tag cdc/destination={name}",
            },
        )
        for name in destination_names(configset)
    ]


def _policy(configset: ConfigSet, name: str) -> FreshnessPolicy | None:
    if name not in configset.destinations:
        return None  # an instance file that does not load: no budget known
    return freshness_policy(configset.destinations[name].config.lag_budget_seconds)


def _uri(configset: ConfigSet, name: str) -> str:
    if name in configset.destinations:
        return change_log_uri(configset, name)
    return destination_root(configset, name)
