"""``MirrorIOManager``: a user asset takes a mirror as a frame by declaring it as an input.

Every mirror's output names this IO manager (resource key :data:`MIRROR_IO_MANAGER`), so a
downstream asset written as::

    @dg.asset(ins={"orders": dg.AssetIn(dg.AssetKey(["cdc", "shop", "orders"]))})
    def open_orders(orders: pyarrow.Table) -> ...

gets the mirror's current rows. The table is found through the mirror's ``dagster/uri``
(its newest materialization's, else its definition's); the type annotation of the input picks
the form: ``pyarrow.Table`` (also without annotation), ``pandas.DataFrame``,
``polars.DataFrame`` (when polars is installed) or a Spark ``DataFrame`` (read through the
session ``spark:`` in platform.yaml chooses, stopped when the step ends). Mirrors are written
by the engine, never through this manager: an output handed to it is refused.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from dagster import ConfigurableIOManager, InitResourceContext, InputContext, OutputContext
from deltalake import DeltaTable
from pydantic import PrivateAttr

from cdc_platform.config import load_platform
from cdc_platform.config.loader import resolve_lake
from cdc_platform.errors import ConfigError
from cdc_platform.spark import SparkSessionFactory

__all__ = ["MIRROR_IO_MANAGER", "MirrorIOManager"]

MIRROR_IO_MANAGER = "cdc_mirror_io_manager"
"""Resource key of the manager on every mirror output."""


class MirrorIOManager(ConfigurableIOManager):
    """Loads mirrors (Delta tables) as pyarrow, pandas, polars or Spark frames."""

    conf_dir: str
    """Directory holding platform.yaml (the lake's storage options, the Spark settings)."""

    _factory: SparkSessionFactory | None = PrivateAttr(default=None)

    def teardown_after_execution(self, context: InitResourceContext) -> None:
        """Stop a Spark session opened for an input."""
        factory, self._factory = self._factory, None
        if factory is not None:
            factory.stop()

    def handle_output(self, context: OutputContext, obj: Any) -> None:
        """Mirrors are written by the engine: nothing to store (a value is refused)."""
        if obj is not None:
            key = context.asset_key.to_user_string()
            raise ConfigError(
                f"{MIRROR_IO_MANAGER} only loads mirrors; asset {key} returned a value to "
                "store: give it another io_manager_key"
            )

    def load_input(self, context: InputContext) -> Any:
        """The upstream mirror as the input's annotated type."""
        uri = _mirror_uri(context)
        wanted = context.dagster_type.typing_type
        module = getattr(wanted, "__module__", "") or ""
        if module.startswith("pyspark"):
            return self._spark().read.format("delta").load(uri)
        conf_dir = Path(self.conf_dir)
        lake = resolve_lake(conf_dir, load_platform(conf_dir))
        table = DeltaTable(uri, storage_options=dict(lake.storage_options))
        if module.startswith("pandas"):
            return table.to_pandas()
        if module.startswith("polars"):
            polars = importlib.import_module("polars")  # optional: only when annotated so
            return polars.from_arrow(table.to_pyarrow_table())
        return table.to_pyarrow_table()

    def _spark(self) -> Any:
        if self._factory is None:
            conf_dir = Path(self.conf_dir)
            platform = load_platform(conf_dir)
            self._factory = SparkSessionFactory(platform.spark, resolve_lake(conf_dir, platform))
        return self._factory.session()


def _mirror_uri(context: InputContext) -> str:
    key = context.asset_key
    event = context.instance.get_latest_materialization_event(key)
    materialization = event.asset_materialization if event else None
    value = materialization.metadata.get("dagster/uri") if materialization else None
    if value is None and context.upstream_output is not None:
        value = context.upstream_output.definition_metadata.get("dagster/uri")
    uri = getattr(value, "value", value)
    if not isinstance(uri, str) or not uri:
        raise ConfigError(f"mirror {key.to_user_string()} has no dagster/uri: is it a mirror?")
    return uri
