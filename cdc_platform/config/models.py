"""Typed configuration: `conf/platform.yaml` and `conf/destinations/<name>/instance.yaml`.

Every model forbids unknown keys, so a typo is an error naming the key instead of a silently
ignored setting. Secrets are never stored in files: a config names the environment variable
that holds them, and the value is read only when a connection is made.
"""

from __future__ import annotations

import os
import re
from typing import Literal

from pydantic import Field, SecretStr, field_validator, model_validator

from cdc_platform.config.base import ConfigModel, read_secret
from cdc_platform.config.batch_mode import BatchMode
from cdc_platform.config.lake import check_lake_root, check_storage_options
from cdc_platform.config.leases import DatabaseLeaseConfig, LeaseConfig, ZooKeeperLeaseConfig
from cdc_platform.config.tls import TlsConfig
from cdc_platform.config.urls import parse_database_url, redact_url, url_has_secret

__all__ = [
    "BatchMode",
    "DagsterSettings",
    "DatabaseLeaseConfig",
    "IdWatchConfig",
    "IdWatchExpireConfig",
    "IdWatchTableConfig",
    "InstanceConfig",
    "LeaseConfig",
    "MetricsConfig",
    "PlatformConfig",
    "ReconcileConfig",
    "ServeSettings",
    "SinkConfig",
    "SnapshotSettings",
    "SourceConfig",
    "SparkConfig",
    "StartConfig",
    "StoreConfig",
    "TlsConfig",
    "WatchConfig",
    "ZooKeeperLeaseConfig",
]

DESTINATION_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$")
"""Destination names become paths, Delta app ids and ZooKeeper nodes: keep them plain."""


_IDENTIFIER = r"[A-Za-z0-9_$]{1,64}"
"""A plain MySQL identifier (what id watch accepts for table and column names)."""


class IdWatchExpireConfig(ConfigModel):
    """Cleanup of expired rows (SOFARegistry's cleanDeleted): rows marked deleted and not modified
    for ``after_seconds`` are deleted in bounded batches after each list."""

    deleted_column: str = Field(pattern=rf"^{_IDENTIFIER}$")
    """Column that is 1 when the row is logically deleted."""
    modified_column: str = Field(pattern=rf"^{_IDENTIFIER}$")
    """Last-modified time (DATETIME or TIMESTAMP, database clock); live rows refresh it."""
    after_seconds: float = Field(gt=0)
    """A deleted row is removed once not modified for this long."""
    batch_size: int = Field(default=500, ge=1, le=100_000)
    """Rows per DELETE statement (and per change-log transaction)."""
    max_batches_per_round: int = Field(default=20, ge=1)
    """DELETE statements per cleanup round at most; the rest waits for the next round."""


class IdWatchTableConfig(ConfigModel):
    """One watched table: an increasing integer id and the row's insert time."""

    table: str
    """`db.table`."""
    id_column: str = Field(pattern=rf"^{_IDENTIFIER}$")
    """Integer column with a unique index, assigned increasing on insert (AUTO_INCREMENT)."""
    created_column: str = Field(pattern=rf"^{_IDENTIFIER}$")
    """The row's insert time (DATETIME or TIMESTAMP, set by the database clock)."""
    stability_delay_seconds: float = Field(default=1.0, ge=0)
    """Rows younger than this are not emitted by the watch yet: a lower id may still be
    uncommitted (SOFARegistry's DB_INSERT_DELAY_MS). Must exceed the longest insert transaction."""
    page_size: int = Field(default=1000, ge=1, le=100_000)
    """Rows per watch query and per list chunk (and at most per change-log transaction)."""
    expire: IdWatchExpireConfig | None = None
    """Delete expired rows after each list; off when unset."""

    @field_validator("table")
    @classmethod
    def _db_dot_table(cls, value: str) -> str:
        if re.fullmatch(rf"{_IDENTIFIER}\.{_IDENTIFIER}", value) is None:
            raise ValueError(f"must be `db.table` (plain names, one dot), got {value!r}")
        return value

    @property
    def db(self) -> str:
        """The database part of :attr:`table`."""
        return self.table.split(".", 1)[0]

    @property
    def name(self) -> str:
        """The table part of :attr:`table`."""
        return self.table.split(".", 1)[1]


class IdWatchConfig(ConfigModel):
    """Polling source for servers without binlog access (SOFARegistry's watch + list +
    cleanup; docs/id_watch.md)."""

    tables: list[IdWatchTableConfig] = Field(min_length=1)
    """The watched tables (include/exclude_tables are not used in this mode)."""
    poll_interval_seconds: float = Field(default=0.5, gt=0)
    """Pause between two watch rounds that found nothing new."""
    list_interval_minutes: tuple[float, float] = (15.0, 30.0)
    """A full list runs at start and then after a delay drawn uniformly from [min, max]."""

    @field_validator("list_interval_minutes")
    @classmethod
    def _interval_ordered(cls, value: tuple[float, float]) -> tuple[float, float]:
        low, high = value
        if low <= 0 or high < low:
            raise ValueError(f"must be [min, max] with 0 < min <= max, got [{low:g}, {high:g}]")
        return value

    @field_validator("tables")
    @classmethod
    def _tables_unique(cls, tables: list[IdWatchTableConfig]) -> list[IdWatchTableConfig]:
        seen: set[str] = set()
        for index, table in enumerate(tables):
            if table.table in seen:
                raise ValueError(f"item {index}: table {table.table} is listed twice")
            seen.add(table.table)
        return tables


_MAX_DECODE_WORKERS = 64

_AUTO_DECODE_WORKERS = 8
"""``decode_workers: auto`` on a large machine: one reader thread keeps only a few workers
busy (its own framing and change events stay serial), and each holds about 35 MB."""


class SourceConfig(ConfigModel):
    """Where the binlog comes from and which tables count."""

    host: str = "127.0.0.1"
    """MySQL/MariaDB host."""
    port: int = Field(default=3306, ge=1, le=65535)
    """MySQL/MariaDB port."""
    user: str
    """User with SELECT, REPLICATION SLAVE and REPLICATION CLIENT."""
    password_env: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    """Name of the environment variable holding the password (never the password itself)."""
    server_id: int = Field(ge=1, le=2**32 - 1)
    """Replica server id for the binlog connection; unique among the source's replicas."""
    include_tables: list[str] = Field(default_factory=lambda: [r".*\..*"])
    """Regexes matched against `db.table` (full match); a table must match one."""
    exclude_tables: list[str] = Field(default_factory=list)
    """Regexes matched against `db.table`; a match excludes the table."""
    resume_by: Literal["file", "gtid"] = "file"
    """Resume by binlog file/position, or by GTID (survives a switch to another source server)."""
    tls: TlsConfig = TlsConfig()
    """TLS of every connection to the source: side reads and the binlog stream (docs/source.md)."""
    connect_timeout_seconds: float = Field(default=10.0, gt=0)
    """Timeout of each connection attempt."""
    heartbeat_seconds: float = Field(default=1.0, gt=0, le=60)
    """Server heartbeat period (the replica's ``MASTER_HEARTBEAT_PERIOD``): an idle server
    sends a heartbeat this often, which keeps the lag true on a quiet source, moves the
    checkpoint forward (``sink.idle_checkpoint_seconds``) and lets the stream notice a dead
    server. At most 60 s (the read timeout is four periods)."""
    reconnect_initial_seconds: float = Field(default=0.5, gt=0)
    """First back-off delay after the server went away."""
    reconnect_max_seconds: float = Field(default=30.0, gt=0)
    """Longest back-off delay between reconnect attempts."""
    decode_workers: int | Literal["auto"] = "auto"
    """Processes decoding rows events: ``auto`` is the cores this process may run on (at most
    8); 1 decodes in the reader thread; N > 1 decodes in N worker processes (about 35 MB
    each), reassembled in binlog order, small rows events still in the reader thread (the
    change log is the same either way; bench/throughput.py shows what it gains here). The
    workers are one pool per process, shared by all its destinations and sized by the first
    that starts it."""
    xa_memory_bytes: int = Field(default=64 * 1024 * 1024, ge=0)
    """What the rows of prepared, not yet committed XA transactions keep in memory together;
    the rest waits in a local temporary file until their ``XA COMMIT`` (docs/source.md)."""
    mode: Literal["binlog", "id_watch"] = "binlog"
    """binlog: stream the binlog; id_watch: poll tables by id plus periodic full lists, for
    servers without binlog access (docs/id_watch.md)."""
    id_watch: IdWatchConfig | None = None
    """The watched tables and timers; required when mode is id_watch, not allowed otherwise."""

    @field_validator("include_tables", "exclude_tables")
    @classmethod
    def _regexes_compile(cls, patterns: list[str]) -> list[str]:
        for index, pattern in enumerate(patterns):
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"item {index}: {pattern!r} is not a valid regex: {exc}") from exc
        return patterns

    @field_validator("decode_workers", mode="before")
    @classmethod
    def _decode_workers(cls, value: object) -> object:
        if value == "auto" or (type(value) is int and 1 <= value <= _MAX_DECODE_WORKERS):
            return value
        raise ValueError(
            f"{value!r} is neither auto (the machine's cores) nor a whole number of "
            f"processes from 1 to {_MAX_DECODE_WORKERS} (1: rows decoded in the reader thread)"
        )

    def decode_processes(self) -> int:
        """The decode processes ``decode_workers`` means on this machine (1: none, the
        reader thread decodes)."""
        if self.decode_workers != "auto":
            return self.decode_workers
        try:
            cores = len(os.sched_getaffinity(0))  # the cores this process may use
        except (AttributeError, OSError):
            cores = os.cpu_count() or 1
        return max(1, min(cores, _AUTO_DECODE_WORKERS))

    @model_validator(mode="after")
    def _mode_settings(self) -> SourceConfig:
        if self.mode == "id_watch" and self.id_watch is None:
            raise ValueError(
                "mode is id_watch but source.id_watch is missing: add it with its tables"
            )
        if self.mode != "id_watch" and self.id_watch is not None:
            raise ValueError(
                f"source.id_watch is set but mode is {self.mode}: set mode: id_watch, "
                "or remove id_watch"
            )
        return self

    def password(self) -> SecretStr:
        """The password from the environment; ConfigError naming the variable if unset."""
        return read_secret(self.password_env)


class StoreConfig(ConfigModel):
    """The in-memory ring buffer between the binlog reader and the sink."""

    buffer_size: int = Field(default=16384, ge=1, le=2**24)
    """Ring capacity in events; must be a power of two."""
    memunit: int = Field(default=1024, ge=1)
    """Bytes per unit in MEMSIZE mode: memory limit = buffer_size x memunit."""
    batch_mode: BatchMode = BatchMode.MEMSIZE
    """ITEMSIZE counts events, MEMSIZE counts bytes."""
    ddl_isolation: bool = False
    """Return each DDL in a batch of its own."""
    batch_size: int = Field(default=4096, ge=1)
    """Events (ITEMSIZE) or memunits (MEMSIZE) per sink batch, i.e. per Delta commit."""
    batch_timeout_seconds: float = Field(default=1.0, gt=0)
    """Longest wait for a full batch before committing what there is (bounds the lag),
    counted from the arrival of the oldest event waiting: after a slow commit or a compaction
    the rows that waited meanwhile are committed at once."""

    @field_validator("buffer_size")
    @classmethod
    def _power_of_two(cls, value: int) -> int:
        if value & (value - 1):
            raise ValueError(f"must be a power of two, got {value}")
        return value


class SinkConfig(ConfigModel):
    """The Delta change-log table."""

    table: str = Field(default="changes", pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")
    """Table directory under `<lake_root>/<destination>/`."""
    idle_checkpoint_seconds: float = Field(default=60.0, gt=0)
    """On an idle source, the position the server's heartbeats report is committed (an empty
    commit) at most this often, so a quiet destination never sits on a binlog the server
    purges; heartbeats in between cost no commit."""


DEFAULT_CHUNK_BYTES = 64 * 1024 * 1024
"""Column bytes one chunk of a side read holds at most (``snapshot.chunk_bytes``)."""


class SnapshotSettings(ConfigModel):
    """Automatic snapshots by the destination's run (docs/snapshot.md)."""

    new_tables: bool = False
    """Copy the rows a table already has when the destination starts capturing it: every
    table at the destination's first start, and later each existing table the filters start
    to match. ``start: {mode: initial}`` (the default) does the same without it; off with
    another start mode: only changes from the start position on (as Canal does)."""
    chunk_size: int | None = Field(default=None, ge=1)
    """Rows per snapshot chunk (one Delta commit each); unset, the rows adapt so that a chunk
    takes about ``chunk_seconds`` (from 2,000, within 500..50,000)."""
    chunk_seconds: float = Field(default=0.5, gt=0)
    """Target time of one chunk when ``chunk_size`` is unset: the binlog reaches the change
    log with each chunk's commit, so this bounds the stream's lag during a snapshot."""
    segment_events: int = Field(default=20_000, ge=1)
    """Binlog events the snapshot holds at most between two commits (a longer backlog is
    committed in parts; a single larger transaction is kept whole)."""
    chunk_bytes: int = Field(default=DEFAULT_CHUNK_BYTES, ge=1)
    """Column bytes one chunk (snapshot, reconciliation's repair and comparison) reads at
    most: fewer rows of a table with large values (a single larger row is read alone)."""


_MARIADB_GTID = re.compile(r"^\d+-\d+-\d+(,\d+-\d+-\d+)*$")
_MYSQL_GTID = re.compile(
    r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
    r"(:\d+(-\d+)?)+(,[0-9a-fA-F-]{36}(:\d+(-\d+)?)+)*$"
)
_UTC_TIMESTAMP = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?Z$")

StartMode = Literal["initial", "latest", "earliest", "position", "gtid", "timestamp"]


class StartConfig(ConfigModel):
    """Where a destination without a checkpoint begins (docs/source.md, "Where a destination
    starts"). Once the change log has a checkpoint, the checkpoint rules."""

    mode: StartMode = "initial"
    """initial: copy every captured table (watermark snapshot), then stream; latest: the
    binlog's current end; earliest: the oldest binlog the server still has; position: ``file``
    and ``pos``; gtid: after the transactions of ``gtid``; timestamp: the first transaction at
    or after ``timestamp``."""
    file: str | None = None
    """mode=position: the binlog file, e.g. `mysql-bin.000042`."""
    pos: int | None = Field(default=None, ge=4)
    """mode=position: the offset of a transaction's first event in ``file``."""
    gtid: str | None = None
    """mode=gtid: the GTID state already captured, in the server's own format (MariaDB
    `domain-server-seq[,...]`, MySQL `uuid:interval[,...]`); reading starts after it."""
    timestamp: str | None = None
    """mode=timestamp: UTC time `YYYY-MM-DDTHH:MM:SS[.ffffff]Z`."""

    @model_validator(mode="after")
    def _mode_fields(self) -> StartConfig:
        wanted = {
            "position": ("file", "pos"),
            "gtid": ("gtid",),
            "timestamp": ("timestamp",),
        }.get(self.mode, ())
        for name in ("file", "pos", "gtid", "timestamp"):
            value = getattr(self, name)
            if name in wanted and value is None:
                raise ValueError(f"mode {self.mode} needs {', '.join(wanted)}; {name} is missing")
            if name not in wanted and value is not None:
                raise ValueError(f"{name} is set but mode is {self.mode}: remove {name}")
        if self.gtid is not None and not (
            _MARIADB_GTID.match(self.gtid) or _MYSQL_GTID.match(self.gtid)
        ):
            raise ValueError(
                f"gtid {self.gtid!r} is neither a MariaDB GTID list (0-1-42[,1-2-7]) nor a "
                "MySQL GTID set (3e11fa47-71ca-11e1-9e33-c80aa9429562:1-42)"
            )
        if self.timestamp is not None and not _UTC_TIMESTAMP.match(self.timestamp):
            raise ValueError(f"timestamp {self.timestamp!r} must be UTC like 2026-11-22T10:00:00Z")
        return self

    def describe(self) -> str:
        """One line for logs, `config check` and `status`: the mode and its values."""
        values = [
            f"{name}={getattr(self, name)}"
            for name in ("file", "pos", "gtid", "timestamp")
            if getattr(self, name) is not None
        ]
        return " ".join([self.mode, *values])


class InstanceConfig(ConfigModel):
    """One destination: one source, one binlog stream, one lease, one change-log table."""

    enabled: bool = True
    """A disabled destination is known but not run."""
    source: SourceConfig
    store: StoreConfig = StoreConfig()
    sink: SinkConfig = SinkConfig()
    snapshot: SnapshotSettings = SnapshotSettings()
    start: StartConfig = StartConfig()
    """Where the destination begins when its change log has no checkpoint yet."""
    lag_budget_seconds: float = Field(default=300.0, gt=0)
    """Lag (source commit to change-log commit) above which the change log's freshness check
    fails."""


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


class DagsterSettings(ConfigModel):
    """Defaults the Dagster face uses."""

    sensor_interval_seconds: int = Field(default=15, ge=1)
    """How often the config and running monitors tick."""
    materialization_min_interval_seconds: float = Field(default=30.0, ge=0)
    """Report committed batches to Dagster at most this often."""
    orphan_after_seconds: float = Field(default=60.0, gt=0)
    """A STARTED run whose lease heartbeat is older than this is marked failed."""
    history_start_date: str = Field(default="2026-01-01", pattern=r"^\d{4}-\d{2}-\d{2}$")
    """First day (UTC, YYYY-MM-DD) of the daily history partitions."""


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
