"""Resources: the platform configuration, as the engine loads it, and the Spark session."""

from __future__ import annotations

import os
from pathlib import Path

from dagster import ConfigurableResource, InitResourceContext
from pydantic import PrivateAttr
from pyspark.sql import SparkSession

from cdc_platform.config import ConfigSet, load_config, load_platform
from cdc_platform.config.loader import resolve_lake
from cdc_platform.spark import SparkSessionFactory

__all__ = ["PlatformResource", "SparkResource", "default_conf_dir"]


def default_conf_dir() -> str:
    """`$CDC_CONF_DIR`, else `conf/` of the project this package was loaded from."""
    return os.environ.get("CDC_CONF_DIR") or str(Path(__file__).resolve().parents[1] / "conf")


class PlatformResource(ConfigurableResource):  # type: ignore[type-arg]
    """The conf directory: platform settings and every destination (valid or not)."""

    conf_dir: str
    """Directory holding platform.yaml and destinations/<name>/instance.yaml."""

    def load(self) -> ConfigSet:
        """Read the configuration now (cheap: a few small YAML files)."""
        return load_config(Path(self.conf_dir))


class SparkResource(ConfigurableResource):  # type: ignore[type-arg]
    """The Spark session chosen by `spark:` in platform.yaml (embedded Sail by default).

    Its life is the execution's: set up with the Spark settings read when the execution starts,
    the session made on first use, stopped when the execution ends. No session outlives the
    run (or the test) that needed it, and a changed `spark:` takes effect with the next run.
    """

    conf_dir: str
    """Directory holding platform.yaml."""

    _factory: SparkSessionFactory | None = PrivateAttr(default=None)

    def setup_for_execution(self, context: InitResourceContext) -> None:
        """Read the Spark and lake settings; connects nothing yet."""
        conf_dir = Path(self.conf_dir)
        platform = load_platform(conf_dir)
        self._factory = SparkSessionFactory(platform.spark, resolve_lake(conf_dir, platform))

    def teardown_after_execution(self, context: InitResourceContext) -> None:
        """Stop the execution's session (the embedded engine stays up for the process)."""
        factory, self._factory = self._factory, None
        if factory is not None:
            factory.stop()

    def session(self) -> SparkSession:
        """The execution's session, made on first call (raises SparkSessionError naming why)."""
        if self._factory is None:
            raise RuntimeError("SparkResource.session() is available only while a step runs")
        return self._factory.session()
