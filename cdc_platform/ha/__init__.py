"""High availability: one lease per destination (ZooKeeper or a database), epochs for fencing.

See :mod:`cdc_platform.ha.lease` for the contract, ``docs/ha.md`` for operation.
"""

from cdc_platform.ha.db_lease import DatabaseLease
from cdc_platform.ha.lease import (
    HolderInfo,
    Lease,
    MemberInfo,
    default_address,
)
from cdc_platform.ha.registry import NodeRegistry
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
