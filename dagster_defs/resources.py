"""Resources: the platform configuration, as the engine loads it."""

from __future__ import annotations

import os
from pathlib import Path

from dagster import ConfigurableResource

from cdc_platform.config import ConfigSet, load_config

__all__ = ["PlatformResource", "default_conf_dir"]


def default_conf_dir() -> str:
    """`$CDC_CONF_DIR`, else `conf/` of the project this package was loaded from."""
    return os.environ.get("CDC_CONF_DIR") or str(Path(__file__).resolve().parents[1] / "conf")


class PlatformResource(ConfigurableResource):  # type: ignore[misc]
    """The conf directory: platform settings and every destination (valid or not)."""

    conf_dir: str
    """Directory holding platform.yaml and destinations/<name>/instance.yaml."""

    def load(self) -> ConfigSet:
        """Read the configuration now (cheap: a few small YAML files)."""
        return load_config(Path(self.conf_dir))
