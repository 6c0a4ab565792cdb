"""The lease backends' settings: ZooKeeper's ephemeral running nodes or a database lease table."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, SecretStr, field_validator, model_validator

from cdc_platform.config.base import ConfigModel, read_secret
from cdc_platform.config.tls import TlsConfig
from cdc_platform.config.urls import parse_database_url
from cdc_platform.config.zookeeper_tls import ZooKeeperTlsConfig

__all__ = ["DatabaseLeaseConfig", "LeaseConfig", "LivenessConfig", "ZooKeeperLeaseConfig"]


class LivenessConfig(ConfigModel):
    """The holder's liveness listener: a standby connected to it learns of the holder's death
    (kill -9 included) when the connection closes and the port refuses, without waiting for the
    session to expire. On by default: a wrong signal only switches early, and the epoch fences
    the old holder (docs/ha.md)."""

    enabled: bool = True
    """Open the listener (holder) and probe it (standby); off: the session expiry alone."""
    host: str | None = None
    """Address to listen on and publish, reachable from the standbys' machines; default this
    machine's host name as it resolves (127.0.0.1 when it does not)."""
    port: int = Field(default=0, ge=0, le=65535)
    """0: any free port."""
    connect_timeout_seconds: float = Field(default=1.0, gt=0, le=30)
    """A standby's connect and greeting timeout; past it the probe proves nothing."""

    @field_validator("host")
    @classmethod
    def _one_address(cls, value: str | None) -> str | None:
        if value is not None and value.strip("[]") in {"", "0.0.0.0", "::"}:  # noqa: S104 (refused here, not bound)
            raise ValueError(
                "liveness.host must be an address the standbys reach this process at, "
                "not a wildcard"
            )
        return value


class ZooKeeperLeaseConfig(ConfigModel):
    """Lease through ZooKeeper ephemeral running nodes (Canal's ServerRunningMonitor)."""

    backend: Literal["zookeeper"]
    hosts: str
    """kazoo connection string, e.g. `zk1:2181,zk2:2181/chroot`."""
    root: str = Field(default="/cdc", pattern=r"^/[A-Za-z0-9_./-]*$")
    """Parent path of the running and cluster nodes."""
    session_timeout_seconds: float = Field(default=10.0, gt=0)
    """ZooKeeper session timeout."""
    switch_delay_seconds: float = Field(default=5.0, ge=0)
    """Wait before grabbing a lease another process lost (anti-flap)."""
    auth_env: str | None = None
    """Environment variable holding `user:password` for a digest ACL, if any."""
    tls: ZooKeeperTlsConfig | None = None
    """TLS to the servers' `secureClientPort` (then `hosts` names those ports); without it
    the digest credentials and the lease nodes travel in plain text."""
    address: str | None = None
    """This process's name in the running and cluster nodes; default `host:pid`."""
    release_cooldown_seconds: float | None = Field(default=None, ge=0)
    """After a manual release, stay away this long so a standby takes over
    (default 2 x switch delay + 1 s)."""
    liveness: LivenessConfig = LivenessConfig()
    """The holder's liveness listener: a kill -9 is taken over without the session expiry."""

    def auth(self) -> SecretStr | None:
        """The digest credentials from the environment, or None without ACLs."""
        return read_secret(self.auth_env) if self.auth_env else None


class DatabaseLeaseConfig(ConfigModel):
    """Lease through a `master_lock` table (ServiceComb Alpha), using the database's clock."""

    backend: Literal["database"]
    url: str = "sqlite:///var/lease.db"
    """`sqlite:///path`, `mysql://user@host:port/db` or `postgresql://user@host:port/db`."""
    password_env: str | None = None
    """Environment variable holding the database password, if any."""
    tls: TlsConfig = TlsConfig()
    """TLS to a MySQL/MariaDB lease database (same modes as ``source.tls``)."""
    single_machine: bool = False
    """Accept a SQLite lease with a lake on object storage: every process of these
    destinations runs on this one machine. Without it such a pair is refused at `run`,
    `serve` and the Dagster run: a process on another machine would take its own lease and
    write the same change log."""
    renew_interval_seconds: float = Field(default=1.0, gt=0)
    """How often the holder renews."""
    expiry_seconds: float = Field(default=5.0, gt=0)
    """A lease not renewed for this long may be taken by another process."""
    table: str = Field(default="master_lock", pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
    """The lease table (one row per destination)."""
    registry_table: str = Field(default="cdc_nodes", pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
    """The node registry table (one heartbeat row per process and destination)."""
    registry_expiry_seconds: float | None = Field(default=None, gt=0)
    """A registry row not refreshed for this long is marked expired (default 2 x expiry)."""
    address: str | None = None
    """This process's `instance_id` in the lease row; default `host:pid`."""
    release_cooldown_seconds: float | None = Field(default=None, ge=0)
    """After a manual release, stay away this long so a standby takes over
    (default 2 x renew interval + 1 s)."""
    liveness: LivenessConfig = LivenessConfig()
    """The holder's liveness listener, published in the node registry: a kill -9 is taken
    over without waiting for the row to expire."""

    @field_validator("url")
    @classmethod
    def _database_url(cls, value: str) -> str:
        parse_database_url(value)  # its ValueError never quotes a password
        return value

    @model_validator(mode="after")
    def _renew_before_expiry(self) -> DatabaseLeaseConfig:
        margin = min(1.0, self.expiry_seconds / 4)
        if self.renew_interval_seconds >= self.expiry_seconds - margin:
            raise ValueError(
                f"renew_interval_seconds ({self.renew_interval_seconds:g}) must be shorter than "
                f"expiry_seconds minus the safety margin ({self.expiry_seconds - margin:g}), "
                "or the holder would lose its own lease between renewals"
            )
        return self

    def password(self) -> SecretStr | None:
        """The database password from the environment, or None."""
        return read_secret(self.password_env) if self.password_env else None


LeaseConfig = Annotated[ZooKeeperLeaseConfig | DatabaseLeaseConfig, Field(discriminator="backend")]
