"""One destination's `conf/destinations/<name>/instance.yaml`: its source and start, and how
its changes travel: the store between reader and sink, the change log, the snapshots."""

from __future__ import annotations

import re

from pydantic import Field, field_validator

from cdc_platform.config.base import ConfigModel
from cdc_platform.config.batch_mode import BatchMode
from cdc_platform.config.source import SourceConfig
from cdc_platform.config.start import StartConfig

__all__ = [
    "DEFAULT_CHUNK_BYTES",
    "DESTINATION_NAME",
    "InstanceConfig",
    "SinkConfig",
    "SnapshotSettings",
    "StoreConfig",
]

DESTINATION_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$")
"""Destination names become paths, Delta app ids and ZooKeeper nodes: keep them plain."""


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
    """Events (ITEMSIZE) or memunits (MEMSIZE) per sink batch, i.e. per Delta commit; taken
    from the store in several gets when the store holds less (docs/source.md)."""
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
