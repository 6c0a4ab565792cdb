"""Settings that load fine but do not fit together for a deployment on several machines.

A lake on object storage with a lease in a local SQLite file is refused where a writer starts
(`run`, `serve`, the Dagster run, `snapshot`): a process on another machine would take its own
lease and write the same change log, each fencing the other off in turn. One machine may say
so (``lease.single_machine: true``). A local state watch only hides this machine's
destinations from `status` elsewhere: a warning. `config check` prints both.
"""

from __future__ import annotations

from cdc_platform.config.leases import DatabaseLeaseConfig
from cdc_platform.config.loader import ConfigSet
from cdc_platform.config.urls import parse_database_url
from cdc_platform.errors import ConfigError

__all__ = ["check_deployment", "deployment_errors", "deployment_warnings"]


def deployment_errors(config: ConfigSet) -> list[str]:
    """Why no writer may start with these settings (a shared lake, a local lease)."""
    lease = config.platform.lease
    if (
        config.lake.is_remote
        and isinstance(lease, DatabaseLeaseConfig)
        and parse_database_url(lease.url).kind == "sqlite"
        and not lease.single_machine
    ):
        return [
            f"lake_root {config.lake.uri} is on object storage but the lease is the local "
            f"SQLite file {lease.url}: processes on other machines would each take their own "
            "lease and write the same change log; use a ZooKeeper or a shared database lease "
            "(lease: in platform.yaml, docs/deploy.md), or, if every process runs on this "
            "one machine, set lease.single_machine: true"
        ]
    return []


def deployment_warnings(config: ConfigSet) -> list[str]:
    """What to tell a user whose lake is shared but whose state store is not."""
    if not config.lake.is_remote:
        return []
    watch_url = config.platform.watch.url
    if watch_url is not None and parse_database_url(watch_url).kind == "sqlite":
        return [
            f"the state watch is the local SQLite file {watch_url}: `status` on another "
            "machine will not see this one's destinations"
        ]
    return []


def check_deployment(config: ConfigSet) -> None:
    """Refuse settings no writer may start with (:func:`deployment_errors`)."""
    errors = deployment_errors(config)
    if errors:
        raise ConfigError(errors[0])
