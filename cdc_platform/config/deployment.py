"""Settings that load fine but do not fit together for a deployment on several machines.

They are warnings, not errors: one machine with an S3 lake and a local SQLite lease works, it
just cannot have a standby on another machine. `config check` prints them.
"""

from __future__ import annotations

from cdc_platform.config.loader import ConfigSet
from cdc_platform.config.models import DatabaseLeaseConfig
from cdc_platform.config.urls import parse_database_url

__all__ = ["deployment_warnings"]


def deployment_warnings(config: ConfigSet) -> list[str]:
    """What to tell a user whose lake is shared but whose lease or state store is not."""
    if not config.lake.is_remote:
        return []
    warnings: list[str] = []
    lease = config.platform.lease
    if isinstance(lease, DatabaseLeaseConfig) and parse_database_url(lease.url).kind == "sqlite":
        warnings.append(
            f"lake_root {config.lake.uri} is on object storage but the lease is the local "
            f"SQLite file {lease.url}: processes on other machines would each take their own "
            "lease and write the same change log; use a ZooKeeper or a shared database lease "
            "(lease: in platform.yaml, docs/deploy.md)"
        )
    watch_url = config.platform.watch.url
    if watch_url is not None and parse_database_url(watch_url).kind == "sqlite":
        warnings.append(
            f"the state watch is the local SQLite file {watch_url}: `status` on another "
            "machine will not see this one's destinations"
        )
    return warnings
