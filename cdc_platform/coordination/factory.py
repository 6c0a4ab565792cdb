"""Build the lease, the node registry and the state store that `conf/platform.yaml` names.

Relative SQLite paths (the default lease is ``sqlite:///var/lease.db``) are relative to the conf
directory's parent, like ``lake_root``: ``conf/`` and ``var/`` sit side by side, and every
process started with the same ``--conf`` shares the same file.

The ZooKeeper classes are imported only when configured: kazoo costs a process that does not
use it about 6 MB.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import SecretStr

from cdc_platform.config.base import read_secret
from cdc_platform.config.leases import DatabaseLeaseConfig, ZooKeeperLeaseConfig
from cdc_platform.config.platform import PlatformConfig
from cdc_platform.errors import WatchError
from cdc_platform.ha.db_lease import DatabaseLease
from cdc_platform.ha.lease import Lease
from cdc_platform.ha.registry import NodeRegistry
from cdc_platform.infra.clock import SYSTEM_CLOCK, Clock
from cdc_platform.infra.sqldb import Database
from cdc_platform.watch.sql import SqlStateStore
from cdc_platform.watch.store import StateStore

__all__ = ["base_dir", "open_lease", "open_registry", "open_state_store"]


def base_dir(conf_dir: Path) -> Path:
    """Where relative paths of platform.yaml start: the conf directory's parent."""
    return conf_dir.resolve().parent


def open_registry(platform: PlatformConfig, conf_dir: Path) -> NodeRegistry | None:
    """The node registry on the lease database; None for ZooKeeper (its member nodes serve)."""
    lease = platform.lease
    if not isinstance(lease, DatabaseLeaseConfig):
        return None
    db = Database(lease.url, password=lease.password(), base_dir=base_dir(conf_dir), tls=lease.tls)
    return NodeRegistry(
        db,
        table=lease.registry_table,
        expiry=lease.registry_expiry_seconds or 2 * lease.expiry_seconds,
    )


def open_lease(  # noqa: PLR0913 (what identifies the lease; the rest keyword-only)
    platform: PlatformConfig,
    conf_dir: Path,
    destination: str,
    *,
    address: str | None = None,
    registry: NodeRegistry | None = None,
    clock: Clock = SYSTEM_CLOCK,
) -> Lease:
    """The lease of ``destination`` as configured (not yet acquired, nothing connected)."""
    lease = platform.lease
    if isinstance(lease, ZooKeeperLeaseConfig):
        from cdc_platform.ha.zookeeper import ZooKeeperLease  # noqa: PLC0415 (kazoo, ~6 MB)

        return ZooKeeperLease(lease, destination, address=address, clock=clock)
    db = Database(lease.url, password=lease.password(), base_dir=base_dir(conf_dir), tls=lease.tls)
    return DatabaseLease(lease, destination, db=db, address=address, registry=registry, clock=clock)


def open_state_store(platform: PlatformConfig, conf_dir: Path) -> StateStore:
    """The state watch store: ``watch.url``, else where the lease is (its database, or
    ZooKeeper under ``<root>/state``)."""
    watch = platform.watch
    lease = platform.lease
    url: str
    password: SecretStr | None
    if watch.url is not None:
        url = watch.url
        password = _secret(watch.password_env)
    elif isinstance(lease, DatabaseLeaseConfig):
        url, password = lease.url, lease.password()
    else:
        from cdc_platform.watch.zookeeper import ZooKeeperStateStore  # noqa: PLC0415 (kazoo)

        return ZooKeeperStateStore(
            lease.hosts,
            root=lease.root,
            history=watch.history,
            session_timeout=lease.session_timeout_seconds,
            auth=lease.auth(),
            tls=lease.tls,
        )
    db = Database(url, password=password, base_dir=base_dir(conf_dir), error=WatchError)
    return SqlStateStore(db, history=watch.history)


def _secret(env: str | None) -> SecretStr | None:

    return read_secret(env) if env else None
