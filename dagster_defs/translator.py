"""One home for the Dagster names of a destination: asset keys, groups, asset tags and the
mirror asset specs (lake locations are the engine's: :mod:`dagster_defs.resources`).

Modelled on dagster-dlt's ``DagsterDltTranslator``: every definition builder takes a
:class:`CdcTranslator` and asks it, so a subclass that overrides a method renames the asset
everywhere at once (its spec, the jobs and sensors that select it, the checks attached to it);
:meth:`CdcTranslator.get_asset_spec` shapes each mirror's spec.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dagster import (
    AssetKey,
    AssetSpec,
    TableColumn,
    TableColumnConstraints,
    TableSchema,
)

from cdc_platform.config import ConfigSet
from cdc_platform.coordination.table_catalog import CatalogTable
from dagster_defs.names import key_part

__all__ = [
    "DEFAULT_TRANSLATOR",
    "MIRROR_METADATA",
    "CdcTableProps",
    "CdcTranslator",
    "column_schema",
    "destination_names",
]

MIRROR_METADATA = (
    "Materialization metadata: `rows_inserted`, `rows_updated`, `rows_deleted` (net effect "
    "per key of this apply), `changes` (change-log rows applied), `last_seq` (newest applied "
    "change; also the data version), `change_log_version` (the change-log Delta version "
    "applied), `lag_seconds` (age of the newest applied change), `mode` (`merge`, `rebuild`, "
    "`noop`), `seconds` (time the apply took), `dropped` (set when the table was dropped or "
    "renamed at the source: kept, empty, not current), `rereading` (true while a re-read after "
    "DDL is under way: the mirror waits before that DDL)."
)
"""What a mirror's own metadata keys mean (part of its description, as Dagster shows it)."""


@dataclass(frozen=True, slots=True)
class CdcTableProps:
    """What the translator knows of one captured table."""

    destination: str
    table: CatalogTable
    """``db``, ``table``, the source's columns (types, keys, comments), where it was found."""
    uri: str
    """Location of its mirror (the engine's layout)."""


def column_schema(table: CatalogTable) -> TableSchema:
    """The table's source columns as Dagster's table schema (comments as descriptions)."""
    return TableSchema(
        columns=[
            TableColumn(
                name=c.name,
                type=c.type or "unknown",
                description=c.comment or None,
                constraints=TableColumnConstraints(nullable=c.nullable, unique=False),
                tags={"primary_key": ""} if c.primary_key else {},
            )
            for c in table.columns
        ]
    )


class CdcTranslator:
    """Destination (and, for per-table names, database and table) -> Dagster names.

    Keys are ``<key_prefix>/<name>`` for a destination's own assets (``cdc/shop/changes``) and
    ``<key_prefix>/<db>/<table>`` for each table's mirror (``cdc/shop/shop/orders``): one part
    longer, so a table never takes a destination asset's key. Each name becomes a key part
    through :func:`~dagster_defs.names.key_part` (unchanged but for ``/ " \\ * %`` and control
    characters, percent-encoded).
    """

    def key_prefix(self, destination: str) -> list[str]:
        """Leading key parts of every asset of ``destination``."""
        return ["cdc", key_part(destination)]

    def changes_key(self, destination: str) -> AssetKey:
        """The change-log table, materialized by the destination's long-lived run."""
        return AssetKey([*self.key_prefix(destination), "changes"])

    def table_key(self, destination: str, db: str, table: str) -> AssetKey:
        """The current-state mirror of one captured table (carries its reconciliation check)."""
        return AssetKey([*self.key_prefix(destination), key_part(db), key_part(table)])

    def table_tags(self, destination: str, db: str, table: str) -> dict[str, str]:
        """Asset tags of one table's mirror (the destination's tags by default)."""
        return self.tags(destination)

    def table_group_name(self, destination: str, db: str, table: str) -> str:
        """Group of one table's mirror (the destination's live group by default)."""
        return self.group_name(destination)

    def table_history_key(self, destination: str, db: str, table: str) -> AssetKey:
        """One table's daily-partitioned change figures and as-of-day state."""
        return AssetKey([*self.table_key(destination, db, table).path, "daily_history"])

    def group_name(self, destination: str) -> str:
        """Group of the assets kept current as changes arrive (change log, mirrors)."""
        return "cdc"

    def history_group_name(self, destination: str) -> str:
        """Group of the daily-partitioned assets (backfilled over date ranges)."""
        return "cdc_history"

    def tags(self, destination: str) -> dict[str, str]:
        """Asset tags of every asset of ``destination``.

        None by default: a tag value allows only ``[A-Za-z0-9_.-]`` (63 at most) and a
        destination's name is any directory name, so a tag could stop the code location loading.
        """
        return {}

    def get_asset_spec(self, props: CdcTableProps) -> AssetSpec:
        """The mirror asset of one table, as dagster-dlt's and dagster-sling's translators
        build theirs: override and ``super().get_asset_spec(props).replace_attributes(...)``
        to change its description, metadata, owners, kinds or automation. Its key must stay
        :meth:`table_key` (checks and sensors address it by that): rename through
        :meth:`key_prefix` / :meth:`table_key`."""
        table = props.table
        metadata: dict[str, Any] = {
            "dagster/uri": props.uri,
            "dagster/table_name": table.name,
            "found_in": ", ".join(table.found_in),
        }
        if table.columns:
            metadata["dagster/column_schema"] = column_schema(table)
        return AssetSpec(
            key=self.table_key(props.destination, table.db, table.table),
            deps=[self.changes_key(props.destination)],
            description=f"Current state of `{table.name}` as captured by destination "
            f"{props.destination}: a Delta table merged from the change log by primary key "
            "in seq order.\n\n" + MIRROR_METADATA,
            group_name=self.table_group_name(props.destination, table.db, table.table),
            tags=self.table_tags(props.destination, table.db, table.table),
            kinds={"spark", "delta"},
            metadata=metadata,
            skippable=True,
        )


DEFAULT_TRANSLATOR = CdcTranslator()
"""The translator of the code location (and the default of every builder)."""


def destination_names(configset: ConfigSet) -> list[str]:
    """Every destination that has assets, sorted: valid and invalid ones alike (a typo in an
    instance file must not make a destination's assets and their history disappear)."""
    return sorted({*configset.destinations, *configset.errors})
