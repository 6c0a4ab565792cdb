"""The binlog source: MySQL/MariaDB row changes, DDL and commits as ChangeEvents.

The names below are imported on first use, so a decode worker that imports only
``source.values`` and ``source.decode_pool`` does not load the whole source (configuration
models, the server probes).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cdc_platform.source.binlog_server import SourceInfo
    from cdc_platform.source.filters import TableFilter
    from cdc_platform.source.stream.binlog import BinlogSource

__all__ = ["BinlogSource", "SourceInfo", "TableFilter"]

_HOMES = {
    "BinlogSource": "cdc_platform.source.stream.binlog",
    "SourceInfo": "cdc_platform.source.binlog_server",
    "TableFilter": "cdc_platform.source.filters",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)
