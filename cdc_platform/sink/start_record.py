"""The start a destination began with, kept next to its change log.

``start:`` in instance.yaml only matters while the change log has no checkpoint; afterwards
the checkpoint rules. A later edit of ``start:`` is therefore never applied, and it must not
go unnoticed either: the run writes ``<lake_root>/<destination>/_start.json`` when it begins
without a checkpoint (the configured start and the position it resolved to), and `config
check` and `status` compare the configured start with it (:func:`start_drift`).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cdc_platform.config.models import StartConfig
from cdc_platform.errors import SinkError
from cdc_platform.events import ResumePosition
from cdc_platform.sink.lake_files import LakeFile

__all__ = ["StartRecord", "start_drift", "start_record_file"]

RECORD_VERSION = 1


def start_record_file(table_uri: str, storage_options: Mapping[str, str] | None = None) -> LakeFile:
    """``_start.json`` in the destination's folder (the change log's parent)."""
    parent = table_uri.rstrip("/").rsplit("/", 1)[0]
    return LakeFile(f"{parent}/_start.json", storage_options)


@dataclass(frozen=True)
class StartRecord:
    """What the destination began with: the configured start and the position it resolved to
    (None for ``initial`` before its snapshot's first commit)."""

    start: StartConfig
    position: str | None
    at: float

    @classmethod
    def load(cls, file: LakeFile) -> StartRecord | None:
        """The record in ``file``, or None if the destination never recorded one."""
        try:
            data: dict[str, Any] | None = file.read_json()
        except ValueError as exc:
            raise SinkError(f"{file}: unreadable start record: {exc}") from None
        if data is None:
            return None
        if data.get("v") != RECORD_VERSION:
            raise SinkError(f"{file}: unknown start record version {data.get('v')!r}")
        return cls(StartConfig(**data["start"]), data.get("position"), float(data["at"]))

    @classmethod
    def write(
        cls, file: LakeFile, start: StartConfig, position: ResumePosition | None
    ) -> StartRecord:
        """Record ``start`` (and where it resolved to) in ``file``, whole at once."""
        record = cls(start, None if position is None else str(position), time.time())
        file.write_json(
            {
                "v": RECORD_VERSION,
                "start": start.model_dump(exclude_none=True),
                "position": record.position,
                "at": record.at,
            }
        )
        return record


def start_drift(configured: StartConfig, record: StartRecord | None) -> str | None:
    """A sentence when the configured start differs from the one the destination began with
    (it is not applied: the checkpoint rules), else None."""
    if record is None or record.start == configured:
        return None
    began = record.start.describe() + (f" at {record.position}" if record.position else "")
    return (
        f"start: is now {configured.describe()}, but the destination began with {began}; the "
        "change log's checkpoint rules, so the new start is not applied (to start over with "
        "it, use a new sink table or destination)"
    )
