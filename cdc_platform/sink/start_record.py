"""The start a destination began with, kept next to its change log.

``start:`` in instance.yaml only matters while the change log has no checkpoint; afterwards
the checkpoint rules. A later edit of ``start:`` is therefore never applied, and it must not
go unnoticed either: the run writes ``<lake_root>/<destination>/_start.json`` when it begins
without a checkpoint (the configured start and the position it resolved to), and `config
check` and `status` compare the configured start with it (:func:`start_drift`).

The record is fenced like every side file (:mod:`cdc_platform.sink.lake_files`): it carries
the writer's lease epoch, a writer never replaces a record of a newer epoch, and its write is
conditional on the record it read just before, so an old holder paused before its write
cannot replace what its successor recorded.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from cdc_platform.config.start import StartConfig
from cdc_platform.errors import SinkError, StaleSideFileError
from cdc_platform.events import ResumePosition
from cdc_platform.sink.lake_files import LakeFile

__all__ = ["StartRecord", "start_drift"]

RECORD_VERSION = 1


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
        cls,
        file: LakeFile,
        start: StartConfig,
        position: ResumePosition | None,
        *,
        epoch: int | None = None,
    ) -> StartRecord:
        """Record ``start`` (and where it resolved to) in ``file``, whole at once, for the
        writer of lease ``epoch``; StaleSideFileError when a newer term recorded it (see the
        module docstring)."""
        try:
            existing = file.read_json()  # the write below is conditional on this version
        except ValueError:
            existing = None  # not a record: replaced
        if isinstance(existing, dict) and epoch is not None:
            theirs = existing.get("epoch")
            if isinstance(theirs, int) and theirs > epoch:
                raise StaleSideFileError(
                    f"{file}: recorded by epoch {theirs}, newer than this writer's {epoch}; "
                    "this writer is fenced off and must stop (its term is over)"
                )
        record = cls(start, None if position is None else str(position), time.time())
        file.write_json(
            {
                "v": RECORD_VERSION,
                "start": start.model_dump(exclude_none=True),
                "position": record.position,
                "at": record.at,
                "epoch": epoch,
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
