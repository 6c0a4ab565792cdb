"""Assets: each destination's change-log table, materialized by its long-lived run."""

from __future__ import annotations

from collections.abc import Iterable

from dagster import AssetSpec

from cdc_platform.config import ConfigSet
from dagster_defs.cdc_job import change_log_key

__all__ = ["change_log_specs"]


def change_log_specs(configset: ConfigSet) -> list[AssetSpec]:
    """One asset per configured destination: `cdc/<destination>/changes`.

    Built when the code location loads; the daemon reloads code locations regularly, so a new
    destination's asset appears without a restart (its run starts at once either way).
    """
    names: Iterable[str] = sorted({*configset.destinations, *configset.errors})
    return [
        AssetSpec(
            key=change_log_key(name),
            description=f"Change log of destination {name}: one row per row change or DDL, "
            "one Delta commit per batch of whole transactions.",
            group_name="cdc",
            kinds={"delta"},
            metadata={"table_uri": _uri(configset, name)},
        )
        for name in names
    ]


def _uri(configset: ConfigSet, name: str) -> str:
    if name in configset.destinations:
        return configset.table_uri(name)
    return str(configset.lake_root / name)
