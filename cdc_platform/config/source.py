"""Where a destination's changes come from: the source server, its tables and how its binlog
is read (``source`` in `instance.yaml`)."""

from __future__ import annotations

import os
import re
from typing import Literal

from pydantic import Field, SecretStr, field_validator, model_validator

from cdc_platform.config.base import ConfigModel, read_secret
from cdc_platform.config.id_watch import IdWatchConfig
from cdc_platform.config.tls import TlsConfig

__all__ = ["SourceConfig"]

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
