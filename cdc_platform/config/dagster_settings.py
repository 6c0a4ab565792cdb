"""platform.yaml ``dagster:``: what the Dagster face schedules, and how it names and owns assets.

Owners and tags are checked here, when the configuration loads, with the rules Dagster applies
when the definitions load (so a typo is a ``ConfigFileError`` naming the key, not a code
location that fails to load): an owner is an email address or ``team:<name>``; a tag key is
``[A-Za-z0-9_.-]`` (63 at most) with an optional ``<namespace>/``; a value is the same
characters, 63 at most. They live in platform.yaml, not in instance.yaml, so changing who owns
a destination's assets never restarts its stream.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator

from cdc_platform.config.base import ConfigModel

__all__ = ["AssetOwnership", "DagsterSettings"]

_EMAIL = re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,7}")
_TAG_KEY = re.compile(r"^([A-Za-z0-9_.-]{1,63}/)?[A-Za-z0-9_.-]{1,63}$")
_TAG_VALUE = re.compile(r"^[A-Za-z0-9_.-]{0,63}$")
RESERVED_TAG_PREFIXES = ("dagster/", "cdc/")
"""Tag namespaces the platform or Dagster set themselves."""


def _owners(owners: list[str]) -> list[str]:
    for index, owner in enumerate(owners):
        if not (_EMAIL.fullmatch(owner) or (owner.startswith("team:") and len(owner) > 5)):
            raise ValueError(
                f"item {index}: {owner!r} is not an owner Dagster accepts: an email address "
                "(ana@example.com) or a team name prefixed with 'team:' (team:sales)"
            )
    return owners


def _tags(tags: dict[str, str]) -> dict[str, str]:
    for key, value in tags.items():
        if not _TAG_KEY.match(key):
            raise ValueError(
                f"tag key {key!r}: allowed are letters, digits, '_', '-', '.', 63 at most, "
                "with an optional namespace ('domain/area')"
            )
        if key.startswith(RESERVED_TAG_PREFIXES):
            raise ValueError(f"tag key {key!r}: the dagster/ and cdc/ namespaces are reserved")
        if not isinstance(value, str) or not _TAG_VALUE.match(value):
            raise ValueError(
                f"tag {key}: value {value!r} must be a string of letters, digits, '_', '-', "
                "'.' (63 at most; quote numbers and booleans in YAML)"
            )
    return tags


class AssetOwnership(ConfigModel):
    """Who owns a destination's assets, and the tags they carry (``dagster.destinations.X``)."""

    owners: list[str] | None = None
    """Owners of the change log, mirrors and history (None: the platform's ``owners``)."""
    tags: dict[str, str] = Field(default_factory=dict)
    """Asset tags, added to (and overriding) the platform's ``tags``."""
    source_kind: Literal["mysql", "mariadb"] | None = None
    """The source's kind badge; None: what the source says when its tables are listed
    (``mysql`` when unknown)."""

    @field_validator("owners")
    @classmethod
    def _valid_owners(cls, value: list[str] | None) -> list[str] | None:
        return None if value is None else _owners(value)

    @field_validator("tags", mode="before")
    @classmethod
    def _valid_tags(cls, value: object) -> object:
        return _tags(value) if isinstance(value, dict) else value


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
    key_style: Literal["readable", "legacy"] = "readable"
    """Asset keys: ``readable`` (``cdc/shop/orders`` when the database is named like the
    destination, ``cdc/shop/orders_daily_history``) or ``legacy``, the keys before it
    (``cdc/shop/shop/orders``, ``cdc/shop/shop/orders/daily_history``)."""
    mirror_refresh_seconds: float | None = Field(default=None, gt=0)
    """At most this long between mirror runs of a destination; None: as long as the mirrors'
    freshness policy allows (docs/dagster.md)."""
    owners: list[str] = Field(default_factory=list)
    """Owners of every destination's assets (email or ``team:<name>``)."""
    tags: dict[str, str] = Field(default_factory=dict)
    """Asset tags of every destination's assets."""
    destinations: dict[str, AssetOwnership] = Field(default_factory=dict)
    """Per destination name: its own owners, tags and source kind."""

    @field_validator("owners")
    @classmethod
    def _valid_owners(cls, value: list[str]) -> list[str]:
        return _owners(value)

    @field_validator("tags", mode="before")
    @classmethod
    def _valid_tags(cls, value: object) -> object:
        return _tags(value) if isinstance(value, dict) else value

    def ownership(self, destination: str) -> AssetOwnership:
        """The owners, tags and source kind of ``destination``'s assets (its own entry over
        the platform's)."""
        own = self.destinations.get(destination, AssetOwnership())
        return AssetOwnership(
            owners=list(self.owners if own.owners is None else own.owners),
            tags={**self.tags, **own.tags},
            source_kind=own.source_kind,
        )
