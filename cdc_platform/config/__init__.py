"""Typed configuration of the platform and its destinations."""

from cdc_platform.config.loader import (
    ConfigSet,
    Destination,
    load_config,
    load_destination,
    load_platform,
)
from cdc_platform.config.models import (
    BatchMode,
    InstanceConfig,
    PlatformConfig,
    SinkConfig,
    SourceConfig,
    StoreConfig,
)

__all__ = [
    "BatchMode",
    "ConfigSet",
    "Destination",
    "InstanceConfig",
    "PlatformConfig",
    "SinkConfig",
    "SourceConfig",
    "StoreConfig",
    "load_config",
    "load_destination",
    "load_platform",
]
