"""One home for the Dagster names of a destination: asset keys, groups, asset tags and the
mirror asset specs (lake locations are the engine's: :mod:`dagster_defs.resources`).

Modelled on dagster-dlt's ``DagsterDltTranslator``: every definition builder takes a
:class:`CdcTranslator` and asks it, so a subclass that overrides a method renames the asset
everywhere at once (its spec, the jobs and sensors that select it, the checks attached to it);
:meth:`CdcTranslator.get_asset_spec` shapes each mirror's spec.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from typing import Any, Literal

from dagster import (
    AssetKey,
    AssetSpec,
    TableColumn,
    TableColumnConstraints,
    TableSchema,
)

from cdc_platform.config import ConfigSet
from cdc_platform.config.dagster_settings import AssetOwnership, DagsterSettings
from cdc_platform.coordination.table_catalog import CatalogTable
from dagster_defs.names import identifier, key_part

__all__ = [
    "DEFAULT_TRANSLATOR",
    "MIRROR_METADATA",
    "CdcTableProps",
    "CdcTranslator",
    "KeyStyle",
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
    source_kind: str = ""
    """``mysql`` or ``mariadb`` as the source said when its tables were listed ("" unknown)."""


KeyStyle = Literal["readable", "legacy"]
"""``readable``: no part repeated (``cdc/shop/orders``); ``legacy``: every part
(``cdc/shop/shop/orders``), the keys before readable ones became the default."""

_TAG_VALUE = re.compile(r"^[A-Za-z0-9_.-]{1,63}$")
HISTORY_SUFFIX = "_daily_history"
"""Readable keys: a table's history is named after it (``orders_daily_history``)."""
DESTINATION_TAG = "cdc/destination"
DATABASE_TAG = "cdc/database"


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

    Keys are ``<key_prefix>/<name>`` for a destination's own assets (``cdc/shop/changes``).
    A table's mirror is ``<key_prefix>/<table>`` when its database is named like the
    destination (``cdc/shop/orders``), else ``<key_prefix>/<db>/<table>``
    (``cdc/shop/crm/customers``), and its daily history ``<mirror key>_daily_history``
    (``cdc/shop/orders_daily_history``): no part repeated, and each graph node named after
    its table. ``key_style="legacy"`` keeps the keys before that (``cdc/shop/shop/orders``,
    ``cdc/shop/shop/orders/daily_history``). Each name becomes a key part through
    :func:`~dagster_defs.names.key_part` (unchanged but for ``/ " \\ * %`` and control
    characters, percent-encoded).

    ``key_style`` None follows platform.yaml's ``dagster.key_style`` (readable by default);
    owners, tags and the source kind come from platform.yaml's ``dagster:`` too
    (:meth:`configured`).
    """

    def __init__(self, key_style: KeyStyle | None = None) -> None:
        self._key_style: KeyStyle | None = key_style
        self._settings = DagsterSettings()

    def configured(self, settings: DagsterSettings) -> CdcTranslator:
        """A copy that reads owners, tags, the source kind (and the key style, unless this
        translator was given one) from platform.yaml's ``dagster:`` settings."""
        bound = copy.copy(self)
        bound._settings = settings
        return bound

    @property
    def key_style(self) -> KeyStyle:
        """The key style in force."""
        settings = getattr(self, "_settings", None) or DagsterSettings()
        return getattr(self, "_key_style", None) or settings.key_style

    def ownership(self, destination: str) -> AssetOwnership:
        """Owners, tags and source kind configured for ``destination``."""
        settings = getattr(self, "_settings", None) or DagsterSettings()
        return settings.ownership(destination)

    def key_prefix(self, destination: str) -> list[str]:
        """Leading key parts of every asset of ``destination``."""
        return ["cdc", key_part(destination)]

    def changes_key(self, destination: str) -> AssetKey:
        """The change-log table, materialized by the destination's long-lived run."""
        return AssetKey([*self.key_prefix(destination), "changes"])

    def table_key(self, destination: str, db: str, table: str) -> AssetKey:
        """The current-state mirror of one captured table (carries its reconciliation check).

        Readable keys drop the database when it is named like the destination, except for a
        table that would take the change log's name."""
        prefix = self.key_prefix(destination)
        if self.key_style == "readable" and db == destination and table != "changes":
            return AssetKey([*prefix, key_part(table)])
        return AssetKey([*prefix, key_part(db), key_part(table)])

    def owners(self, destination: str) -> list[str]:
        """Owners of every asset of ``destination`` (platform.yaml ``dagster.owners``, or
        ``dagster.destinations.<name>.owners``)."""
        return list(self.ownership(destination).owners or [])

    def source_kind(self, destination: str, detected: str = "") -> str:
        """The source's kind badge: configured, else as detected, else ``mysql``."""
        return self.ownership(destination).source_kind or detected or "mysql"

    def table_tags(self, destination: str, db: str, table: str) -> dict[str, str]:
        """Asset tags of one table's mirror and history: the destination's, and
        ``cdc/database`` (the database's name, or its identifier form when the name is not a
        valid tag value)."""
        tags = self.tags(destination)
        value = db if _TAG_VALUE.match(db) else identifier(db)
        if _TAG_VALUE.match(value):
            tags[DATABASE_TAG] = value
        return tags

    def table_group_name(self, destination: str, db: str, table: str) -> str:
        """Group of one table's mirror (the destination's live group by default)."""
        return self.group_name(destination)

    def table_history_key(self, destination: str, db: str, table: str) -> AssetKey:
        """One table's daily-partitioned change figures and as-of-day state."""
        mirror = self.table_key(destination, db, table).path
        if self.key_style == "legacy":
            return AssetKey([*mirror, "daily_history"])
        return AssetKey([*mirror[:-1], f"{mirror[-1]}{HISTORY_SUFFIX}"])

    def group_name(self, destination: str) -> str:
        """Group of the assets kept current as changes arrive (change log, mirrors)."""
        return "cdc"

    def history_group_name(self, destination: str) -> str:
        """Group of the daily-partitioned assets (backfilled over date ranges)."""
        return "cdc_history"

    def tags(self, destination: str) -> dict[str, str]:
        """Asset tags of every asset of ``destination``: platform.yaml's ``dagster.tags`` and
        the destination's own, and ``cdc/destination`` (a destination's name is always a
        valid tag value)."""
        return {**self.ownership(destination).tags, DESTINATION_TAG: destination}

    def get_asset_spec(self, props: CdcTableProps) -> AssetSpec:
        """The mirror asset of one table, as dagster-dlt's and dagster-sling's translators
        build theirs: override and ``super().get_asset_spec(props).replace_attributes(...)``
        to change its description, metadata, owners, kinds or automation. Its kinds are the
        source's (``mysql`` / ``mariadb``), ``spark`` and ``delta``. Its key must stay
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
            owners=self.owners(props.destination),
            kinds={self.source_kind(props.destination, props.source_kind), "spark", "delta"},
            metadata=metadata,
            skippable=True,
        )


DEFAULT_TRANSLATOR = CdcTranslator()
"""The translator of the code location (and the default of every builder)."""


def destination_names(configset: ConfigSet) -> list[str]:
    """Every destination that has assets, sorted: valid and invalid ones alike (a typo in an
    instance file must not make a destination's assets and their history disappear)."""
    return sorted({*configset.destinations, *configset.errors})
