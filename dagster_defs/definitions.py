"""The code location of this project: the platform's definitions for ``$CDC_CONF_DIR``."""

from __future__ import annotations

from dagster_defs.factory import build_definitions
from dagster_defs.resources import default_conf_dir

defs = build_definitions(default_conf_dir())
