"""``CdcComponent``: the platform as a Dagster Component, for projects built with ``dg``.

``defs.yaml``::

    type: dagster_defs.CdcComponent
    attributes:
      conf_dir: conf            # platform.yaml and destinations/<name>/instance.yaml
      key_prefix: [cdc]         # optional: keys are [*key_prefix, <destination>, <db>, <table>]
      group: cdc                # optional: group of the change logs and mirrors
      tags: {team: data}        # optional: asset tags of every mirror
      key_style: legacy         # optional: keys before readable ones (cdc/shop/shop/orders)
      table_selector:           # optional: which captured tables get assets (globs on db.table)
        include: ["shop.*"]
        exclude: ["shop.tmp_*"]

A state-backed component: the tables of each destination (source ``information_schema`` plus
the change log) are its state, written by ``dg utils refresh-defs-state`` (and by ``dg dev``),
so definitions load fast and without the source. Without state yet it uses what the change
logs already hold.
"""

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Annotated

from dagster import Definitions
from dagster.components import (
    ComponentLoadContext,
    DefsStateConfig,
    DefsStateConfigArgs,
    Model,
    Resolvable,
    ResolvedDefsStateConfig,
    Resolver,
    Scaffolder,
    ScaffoldRequest,
    StateBackedComponent,
    scaffold_component,
    scaffold_with,
)
from pydantic import Field

from cdc_platform.config import load_config
from cdc_platform.coordination.table_catalog import Catalog
from dagster_defs.factory import build_definitions, discover_catalogs
from dagster_defs.names import key_part
from dagster_defs.translator import CdcTranslator, KeyStyle

__all__ = ["CdcComponent", "CdcScaffolder", "PrefixTranslator", "TableSelector"]


class PrefixTranslator(CdcTranslator):
    """Keys under ``key_prefix``, one group for the live assets, tags on every mirror."""

    def __init__(
        self,
        key_prefix: list[str],
        group: str,
        tags: dict[str, str] | None = None,
        key_style: KeyStyle | None = None,
    ) -> None:
        super().__init__(key_style)
        self._prefix = list(key_prefix)
        self._group = group
        self._tags = dict(tags or {})

    def table_tags(self, destination: str, db: str, table: str) -> dict[str, str]:
        """The platform's tags (destination, database, platform.yaml's) and the component's
        ``tags``."""
        return {**super().table_tags(destination, db, table), **self._tags}

    def key_prefix(self, destination: str) -> list[str]:
        """``[*key_prefix, destination]``."""
        return [*self._prefix, key_part(destination)]

    def group_name(self, destination: str) -> str:
        """The component's group."""
        return self._group


class TableSelector(Resolvable, Model):
    """Which captured tables get assets, like dagster-fivetran's ``connector_selector``:
    shell-style globs on ``db.table`` (``*`` any text, ``?`` one character)."""

    include: list[str] = Field(default_factory=lambda: ["*"])
    """A table gets assets when its name matches one of these..."""
    exclude: list[str] = Field(default_factory=list)
    """...and none of these."""

    def select(self, catalogs: Mapping[str, Catalog]) -> dict[str, Catalog]:
        """``catalogs`` with only the selected tables."""
        return {
            name: replace(
                catalog,
                tables=tuple(
                    t
                    for t in catalog.tables
                    if any(fnmatchcase(t.name, p) for p in self.include)
                    and not any(fnmatchcase(t.name, p) for p in self.exclude)
                ),
            )
            for name, catalog in catalogs.items()
        }


def _state_to_catalogs(text: str) -> dict[str, Catalog]:
    doc = json.loads(text)
    return {name: Catalog.from_json(entry) for name, entry in doc["catalogs"].items()}


class CdcScaffolder(Scaffolder):
    """``dg scaffold defs dagster_defs.CdcComponent <path>``: a defs.yaml to fill in."""

    def scaffold(self, request: ScaffoldRequest) -> None:
        """Write defs.yaml with the attributes a user sets first."""
        scaffold_component(request, {"conf_dir": "conf", "key_prefix": ["cdc"], "group": "cdc"})


@scaffold_with(CdcScaffolder)
@dataclass
class CdcComponent(StateBackedComponent, Resolvable):
    """CDC from MySQL/MariaDB binlogs into Delta Lake: each destination's change log, one
    mirror asset per captured table, daily history, reconciliation checks, lag checks, the
    long-lived streaming job and the sensors that run it."""

    conf_dir: Annotated[
        str,
        Resolver.default(
            description="Directory holding platform.yaml and destinations/<name>/instance.yaml "
            "(relative paths: from the project root).",
            examples=["conf"],
        ),
    ]
    key_prefix: Annotated[
        list[str],
        Resolver.default(
            description="Leading key parts; keys are [*key_prefix, destination, db, table].",
            examples=[["cdc"]],
        ),
    ] = field(default_factory=lambda: ["cdc"])
    group: Annotated[
        str,
        Resolver.default(description="Group of the change logs and table mirrors."),
    ] = "cdc"
    tags: Annotated[
        dict[str, str],
        Resolver.default(description="Asset tags of every table mirror and its history."),
    ] = field(default_factory=dict)
    key_style: Annotated[
        KeyStyle | None,
        Resolver.default(
            description="readable (cdc/shop/orders) or legacy (cdc/shop/shop/orders, the keys "
            "before readable ones became the default); unset: platform.yaml's "
            "dagster.key_style.",
            examples=["legacy"],
        ),
    ] = None
    table_selector: Annotated[
        TableSelector,
        Resolver.default(
            description="Which captured tables get assets: globs on db.table "
            "(include, then exclude).",
            examples=[{"include": ["shop.*"], "exclude": ["shop.tmp_*"]}],
        ),
    ] = field(default_factory=TableSelector)
    defs_state: ResolvedDefsStateConfig = field(
        default_factory=DefsStateConfigArgs.local_filesystem
    )

    @property
    def defs_state_config(self) -> DefsStateConfig:
        """Where the table catalog is kept, keyed by the conf directory."""
        return DefsStateConfig.from_args(
            self.defs_state, default_key=f"CdcComponent[{Path(self.conf_dir).name}]"
        )

    def _conf_dir(self, root: Path | None = None) -> Path:
        path = Path(self.conf_dir)
        return path if path.is_absolute() else (root or Path.cwd()) / path

    def write_state_to_path(self, state_path: Path) -> None:
        """Discover every destination's tables (source and change log) and store them."""
        catalogs = discover_catalogs(load_config(self._conf_dir()))
        state_path.write_text(
            json.dumps({"catalogs": {n: c.to_json() for n, c in catalogs.items()}})
        )

    def build_defs_from_state(
        self, context: ComponentLoadContext, state_path: Path | None
    ) -> Definitions:
        """The platform's definitions over the stored catalog (or the change logs' tables)."""
        conf_dir = self._conf_dir(Path(context.project_root))
        if state_path is not None and state_path.exists():
            catalogs = _state_to_catalogs(state_path.read_text())
        else:
            catalogs = discover_catalogs(load_config(conf_dir), use_source=False)
        return build_definitions(
            str(conf_dir),
            translator=self.get_translator(),
            catalogs=self.table_selector.select(catalogs),
        )

    def get_translator(self) -> CdcTranslator:
        """The translator of the definitions: override it in a subclass to change any asset
        spec (``get_asset_spec``), keeping the attributes' keys, group and tags."""
        return PrefixTranslator(self.key_prefix, self.group, self.tags, self.key_style)
