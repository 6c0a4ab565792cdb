"""Settings every destination shares: `conf/platform.yaml` (the lake, the lease, the state
watch, Spark, the Dagster face, `serve`, reconciliation and metrics)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, SecretStr, field_validator

from cdc_platform.config.base import ConfigModel, read_secret
from cdc_platform.config.dagster_settings import AssetOwnership, DagsterSettings
from cdc_platform.config.lake import check_lake_root, check_storage_options
from cdc_platform.config.leases import DatabaseLeaseConfig, LeaseConfig
from cdc_platform.config.urls import parse_database_url, redact_url, url_has_secret

__all__ = [
    "AssetOwnership",
    "DagsterSettings",
    "MetricsConfig",
    "PlatformConfig",
    "ReconcileConfig",
    "ServeSettings",
    "SparkConfig",
    "WatchConfig",
]


class SparkConfig(ConfigModel):
    """Which Spark runs the downstream assets; the transformation code is the same for all."""

    mode: Literal["embedded", "connect", "classic"] = "embedded"
    """embedded: in-process Sail; connect: a Spark Connect URL; classic: PySpark + delta-spark."""
    connect_url: str | None = None
    """`sc://host:15002`, for mode=connect (no token here: see `token_env`)."""
    token_env: str | None = None
    """mode=connect: environment variable holding the Spark Connect bearer token, if any."""
    master: str = "local[2]"
    """Master URL, for mode=classic."""
    app_name: str = "cdc-platform"
    """Spark application name (classic) / Spark Connect client type (connect, embedded)."""
    conf: dict[str, str] = Field(default_factory=dict)
    """Extra Spark settings for the session, e.g. `spark.sql.shuffle.partitions`."""
    embedded_host: str = "127.0.0.1"
    """Address the embedded Sail server listens on, for mode=embedded."""
    embedded_port: int = Field(default=0, ge=0, le=65535)
    """Port of the embedded Sail server; 0 picks a free one."""
    jars: Literal["installed", "maven", "provided"] = "installed"
    """mode=classic: where delta-spark and hadoop-aws come from. `installed`: the files
    `scripts/setup.sh` fetched once (`spark.jars`, nothing resolved when a session starts);
    `maven`: Spark resolves them from Maven Central at start (`spark.jars.packages`);
    `provided`: neither (a cluster image, or `spark.jars` in `conf`)."""

    @field_validator("connect_url")
    @classmethod
    def _no_token_in_url(cls, value: str | None) -> str | None:
        if value is not None and url_has_secret(value):
            raise ValueError(
                f"{redact_url(value)!r} must not contain a token or password: put it in an "
                "environment variable and name it in token_env"
            )
        return value

    def token(self) -> SecretStr | None:
        """The Spark Connect token from the environment, or None."""
        return read_secret(self.token_env) if self.token_env else None


class ServeSettings(ConfigModel):
    """`cdc-platform serve`: how its config monitor scans the conf directory."""

    scan_interval_seconds: float = Field(default=10.0, gt=0)
    """Full rescan this often: the safety net behind the file-system events."""
    stop_timeout_seconds: float = Field(default=60.0, gt=0)
    """How long a reload or removal waits for a destination's in-flight commit; a stop that
    takes longer is retried at the next scan."""


class WatchConfig(ConfigModel):
    """Where the state watch (lease and config state for `status` and Dagster) is kept."""

    url: str | None = None
    """A database URL like the lease's; default: where the lease is (its database, or
    ZooKeeper under `<root>/state`)."""
    password_env: str | None = None
    """Environment variable holding that database's password, if any."""
    history: int = Field(default=1000, ge=1)
    """Events kept for watchers that reconnect; older ones mean "re-list"."""

    @field_validator("url")
    @classmethod
    def _database_url(cls, value: str | None) -> str | None:
        if value is not None:
            parse_database_url(value)  # its ValueError never quotes a password
        return value

    publish_interval_seconds: float = Field(default=1.0, gt=0)
    """Each process writes its status at most this often."""


class MetricsConfig(ConfigModel):
    """The Prometheus endpoint of `cdc-platform run` and `serve` (docs/operations.md)."""

    host: str = "127.0.0.1"
    """Address the endpoint listens on (``0.0.0.0``: every interface)."""
    port: int | None = Field(default=None, ge=0, le=65535)
    """Port of ``/metrics``; 0 picks a free port (shown by `status`); None (the default):
    no endpoint unless ``--metrics-port`` asks for one."""


class ReconcileConfig(ConfigModel):
    """Scheduled full-list reconciliation of sources against their mirrors (docs/reconcile.md)."""

    enabled: bool = True
    """Whether the Dagster `reconcile_sensor` sensor launches reconciliations."""
    interval_minutes: tuple[float, float] = (15.0, 30.0)
    """Each next run is due after a random time in [min, max] (SOFARegistry's list loop)."""
    chunk_size: int = Field(default=10_000, ge=1)
    """Source rows per checksum chunk."""
    max_repairs_per_table: int = Field(default=100_000, ge=1)
    """At most this many keys are repaired per table and run."""
    wait_seconds: float = Field(default=300.0, gt=0)
    """How long the lease holder may take to claim a repair request before it is withdrawn."""
    max_repair_backlog_bytes: int = Field(default=1 << 30, ge=0)
    """A reconciliation that repairs under its own lease (nobody streams the destination)
    refuses when the change log's checkpoint is more binlog bytes than this behind the
    source: the repair would first stream all of it. Start the destination to catch up."""

    @field_validator("interval_minutes")
    @classmethod
    def _ordered(cls, value: tuple[float, float]) -> tuple[float, float]:
        low, high = value
        if low <= 0 or high < low:
            raise ValueError(f"expected [min, max] with 0 < min <= max, not {list(value)}")
        return value


class PlatformConfig(ConfigModel):
    """Settings shared by every destination."""

    lake_root: str = "var/lake"
    """Root of the Delta tables: a local path (relative paths are relative to the conf
    directory's parent) or ``s3://bucket/prefix`` (credentials and endpoint from the standard
    AWS environment variables)."""
    lake_storage_options: dict[str, str] = Field(default_factory=dict)
    """Non-secret delta-rs storage options for the lake (e.g. ``aws_s3_locking_provider``);
    a key that looks like a secret is refused: secrets come from the environment only."""
    lease: LeaseConfig = DatabaseLeaseConfig(backend="database")
    """The HA lease; the default is a SQLite file `var/lease.db` relative to the conf
    directory's parent (like `lake_root`), which serves processes on one machine."""
    watch: WatchConfig = WatchConfig()
    spark: SparkConfig = SparkConfig()
    dagster: DagsterSettings = DagsterSettings()
    serve: ServeSettings = ServeSettings()
    reconcile: ReconcileConfig = ReconcileConfig()
    metrics: MetricsConfig = MetricsConfig()

    @field_validator("lake_root")
    @classmethod
    def _lake_root(cls, value: str) -> str:
        return check_lake_root(value)

    @field_validator("lake_storage_options")
    @classmethod
    def _lake_options(cls, value: dict[str, str]) -> dict[str, str]:
        check_storage_options(value)
        return value
