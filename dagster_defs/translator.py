"""One home for the Dagster names of a destination: asset keys, groups, asset tags and lake paths.

Modelled on dagster-dlt's ``DagsterDltTranslator``: every definition builder takes a
:class:`CdcTranslator` and asks it, so a subclass that overrides a method renames the asset
everywhere at once (its spec, the jobs and sensors that select it, the checks attached to it).
"""

from __future__ import annotations

from datetime import date

from dagster import AssetKey

from cdc_platform.config import ConfigSet
from cdc_platform.spark import mirror_root
from dagster_defs.names import key_part

__all__ = ["DEFAULT_TRANSLATOR", "CdcTranslator", "destination_names"]


class CdcTranslator:
    """Destination (and, for per-table names, database and table) -> Dagster names.

    Keys are ``<key_prefix>/<name>`` for a destination's own assets (``cdc/shop/changes``) and
    ``<key_prefix>/<db>/<table>`` for each table's mirror (``cdc/shop/shop/orders``): one part
    longer, so a table never takes a destination asset's key. Each name becomes a key part
    through :func:`~dagster_defs.names.key_part` (unchanged but for ``/ " \\ * %`` and control
    characters, percent-encoded). Lake paths follow the engine's layout, which the
    reconciliation reads too: override them only together with the engine.
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

    def destination_root(self, configset: ConfigSet, destination: str) -> str:
        """Location of everything the destination writes under the lake root (a local path
        or an ``s3://`` URI)."""
        return configset.lake.join(destination)

    def change_log_uri(self, configset: ConfigSet, destination: str) -> str:
        """The change-log table of a valid destination (KeyError for any other)."""
        return configset.table_uri(destination)

    def mirror_root(self, configset: ConfigSet, destination: str) -> str:
        """Directory of the destination's mirror tables (one per captured table)."""
        return mirror_root(configset.lake.uri, destination)

    def history_root(self, configset: ConfigSet, destination: str, day: date) -> str:
        """Location of the destination's tables as of the end of ``day``."""
        return configset.lake.join(destination, "history", day.isoformat())


DEFAULT_TRANSLATOR = CdcTranslator()
"""The translator of the code location (and the default of every builder)."""


def destination_names(configset: ConfigSet) -> list[str]:
    """Every destination that has assets, sorted: valid and invalid ones alike (a typo in an
    instance file must not make a destination's assets and their history disappear)."""
    return sorted({*configset.destinations, *configset.errors})
