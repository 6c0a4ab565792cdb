"""A destination's records of its tables, as stored beside its change log.

* ``_captured_tables.json`` (format ``v`` 2; ``v`` 1 files, written before ``ended``, and
  files without a ``v`` at all are read too): the tables the change log holds completely, the
  ones whose copy was ended with why, and the batch and filters of the last listing
  (:mod:`cdc_platform.backfill.new_tables` says what each part is for);
* ``_reread_tables.json`` (format ``v`` 1): the tables waiting for a re-read after DDL, each
  with the mark of its listing (:mod:`cdc_platform.backfill.reread_list`).

Where they are is :class:`~.destination_lake.DestinationLake`'s; what they hold, and their
(de)serialisation, is here, one type per file.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from cdc_platform.errors import SnapshotError
from cdc_platform.sink.lake_files import LakeFile

__all__ = ["CAPTURED_VERSION", "REREAD_VERSION", "CapturedTables", "RereadList"]

CAPTURED_VERSION = 2
REREAD_VERSION = 1


@dataclass
class CapturedTables:
    """The record of captured tables in ``path`` (``exists``: it was read from, or written
    to, the lake); see the module docstring."""

    path: LakeFile
    tables: set[str] = field(default_factory=set)
    ended: dict[str, str] = field(default_factory=dict)
    after_batch: int | None = None
    filters: list[list[str]] | None = None
    exists: bool = False

    @classmethod
    def from_json(cls, path: LakeFile, data: Mapping[str, Any]) -> CapturedTables:
        """The record stored as ``data`` (format 1 or 2) at ``path``."""
        version = data.get("v", 1)
        if version not in (1, CAPTURED_VERSION):
            raise SnapshotError(f"{path}: unknown record version {version!r}")
        after = data.get("after_batch")
        return cls(
            path,
            set(data.get("tables", [])),
            dict(data.get("ended", {})),
            None if after is None else int(after),
            data.get("filters"),
            exists=True,
        )

    def to_json(self) -> dict[str, Any]:
        """The stored form (format 2)."""
        return {
            "v": CAPTURED_VERSION,
            "tables": sorted(self.tables),
            "ended": dict(sorted(self.ended.items())),
            "after_batch": self.after_batch,
            "filters": self.filters,
        }

    @classmethod
    def load(cls, path: LakeFile) -> CapturedTables:
        """The record at ``path`` (an empty one if there is none; v1 files are read too)."""
        try:
            data: dict[str, Any] | None = path.read_json()
        except ValueError as exc:
            raise SnapshotError(f"{path}: unreadable record of captured tables: {exc}") from None
        return cls(path) if data is None else cls.from_json(path, data)

    def save(self) -> None:
        """Write the whole record at once (see :class:`LakeFile`)."""
        self.path.write_json(self.to_json())
        self.exists = True

    def done(self, table: str, reason: str | None = None) -> None:
        """Record that ``table`` needs no more copying (``reason``: it was not copied)."""
        self.tables.add(table)
        if reason is not None:
            self.ended[table] = reason
        else:
            self.ended.pop(table, None)
        self.save()


@dataclass(frozen=True)
class RereadList:
    """The tables waiting for a re-read, oldest first, each with the mark of its listing;
    ``next_mark``: the mark the next listing gets."""

    tables: Mapping[str, int] = field(default_factory=dict)
    next_mark: int = 1

    @classmethod
    def from_json(cls, path: LakeFile, data: Mapping[str, Any] | None) -> RereadList:
        """The list stored as ``data`` at ``path`` (None: no file, an empty list)."""
        if data is None:
            return cls()
        if data.get("v") != REREAD_VERSION:
            raise SnapshotError(f"{path}: unknown record version {data.get('v')!r}")
        waiting = {str(t): int(m) for t, m in data.get("tables", {}).items()}
        return cls(waiting, int(data.get("next", 1)))

    def to_json(self) -> dict[str, Any]:
        """The stored form (format 1)."""
        return {"v": REREAD_VERSION, "tables": dict(self.tables), "next": self.next_mark}

    def listing(self, tables: Iterable[str]) -> RereadList:
        """This list with ``tables`` listed (again: with a new mark, at the end)."""
        waiting, mark = dict(self.tables), self.next_mark
        for table in tables:
            waiting.pop(table, None)
            waiting[table] = mark
            mark += 1
        return RereadList(waiting, mark)

    def without(self, done: Mapping[str, int]) -> RereadList:
        """This list without the entries ``done`` (a table listed again since keeps its newer
        entry)."""
        left = {t: m for t, m in self.tables.items() if done.get(t) != m}
        return RereadList(left, self.next_mark)
