"""Assets: each destination's change-log table, materialized by its long-lived run."""

from __future__ import annotations

from dagster import AssetSpec

from cdc_platform.config import ConfigSet
from dagster_defs.resources import change_log_uri, destination_root
from dagster_defs.translator import DEFAULT_TRANSLATOR, CdcTranslator, destination_names

__all__ = ["change_log_specs"]


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
            "Materialization metadata (one per `materialization_min_interval_seconds`): "
            "`batch_seq`, `delta_version` (newest commit), `rows` and `batches` since the "
            "previous one, `rows_total_this_run`, `rows_per_second`, `lag_seconds` (now minus "
            "the source time of the newest committed change), `epoch` (lease epoch of the "
            "writer), `position` (binlog resume position). Observations: the running "
            "monitor's `holder`, `live_runs`, `lag_seconds`; snapshot progress (`snapshot_*`).",
            group_name=translator.group_name(name),
            tags=translator.tags(name),
            kinds={"delta"},
            metadata={"table_uri": _uri(configset, name, translator)},
        )
        for name in destination_names(configset)
    ]


def _uri(configset: ConfigSet, name: str, translator: CdcTranslator) -> str:
    if name in configset.destinations:
        return change_log_uri(configset, name)
    return destination_root(configset, name)
