"""State watch: numbered changes of keys, a bounded history, re-list when behind.

Lease and config state is published here by the running processes; ``cdc-platform status`` and
the Dagster sensors read it.
"""

from typing import TYPE_CHECKING

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

if TYPE_CHECKING:
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


def __getattr__(name: str) -> object:
    """``ZooKeeperStateStore`` on first use: it imports kazoo (about 6 MB), which
    a process that does not use ZooKeeper never needs."""
    if name == "ZooKeeperStateStore":
        from cdc_platform.watch.zookeeper import ZooKeeperStateStore  # noqa: PLC0415 (kazoo only on first use, see the docstring)

        return ZooKeeperStateStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
