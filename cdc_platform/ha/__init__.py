"""High availability: one lease per destination (ZooKeeper or a database), epochs for fencing.

See :mod:`cdc_platform.ha.lease` for the contract, ``docs/ha.md`` for operation.
"""

from typing import TYPE_CHECKING

from cdc_platform.ha.db_lease import DatabaseLease
from cdc_platform.ha.lease import Lease
from cdc_platform.ha.members import HolderInfo, MemberInfo, default_address
from cdc_platform.ha.registry import NodeRegistry

if TYPE_CHECKING:
    from cdc_platform.ha.zookeeper import ZooKeeperLease

__all__ = [
    "DatabaseLease",
    "HolderInfo",
    "Lease",
    "MemberInfo",
    "NodeRegistry",
    "ZooKeeperLease",
    "default_address",
]


def __getattr__(name: str) -> object:
    """``ZooKeeperLease`` on first use: it imports kazoo (about 6 MB), which
    a process that does not use ZooKeeper never needs."""
    if name == "ZooKeeperLease":
        from cdc_platform.ha.zookeeper import ZooKeeperLease  # noqa: PLC0415 (kazoo only on first use, see the docstring)

        return ZooKeeperLease
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
