"""State watch: numbered changes of keys, a bounded history, re-list when behind.

Lease and config state is published here by the running processes; ``cdc-platform status`` and
the Dagster sensors read it.
"""

from cdc_platform.watch.publisher import StatePublisher
from cdc_platform.watch.sql import SqlStateStore
from cdc_platform.watch.store import (
    Entry,
    EventKind,
    Listing,
    MemoryStateStore,
    StateStore,
    WatchEvent,
)
from cdc_platform.watch.zookeeper import ZooKeeperStateStore

__all__ = [
    "Entry",
    "EventKind",
    "Listing",
    "MemoryStateStore",
    "SqlStateStore",
    "StatePublisher",
    "StateStore",
    "WatchEvent",
    "ZooKeeperStateStore",
]
