"""Typed configuration of the platform and its destinations."""

from cdc_platform.config.batch_mode import BatchMode
from cdc_platform.config.instance import InstanceConfig, SinkConfig, StoreConfig
from cdc_platform.config.loader import (
    ConfigSet,
    Destination,
    load_config,
    load_destination,
    load_platform,
)
from cdc_platform.config.platform import PlatformConfig
from cdc_platform.config.source import SourceConfig

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
