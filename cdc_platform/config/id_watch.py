"""The id watch's settings: the tables polled by increasing id, their timers and the cleanup
of expired rows (``source.id_watch``, docs/id_watch.md)."""

from __future__ import annotations

import re

from pydantic import Field, field_validator

from cdc_platform.config.base import ConfigModel

__all__ = ["IdWatchConfig", "IdWatchExpireConfig", "IdWatchTableConfig"]

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
