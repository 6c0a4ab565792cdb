"""A snapshot's state, as stored in ``_snapshot_state.json`` (format ``v`` 1).

The snapshot runner (:mod:`cdc_platform.backfill.snapshot`) writes it at every chunk, so any
node can finish a snapshot another one began; `status`, metrics and Dagster read its
``progress`` (:mod:`.snapshot_progress`). One record type with its own (de)serialisation
serves both, so writer and readers cannot drift apart.

Files written before ``ended``, ``progress`` or a chunk's ``chunk`` mark were kept still load:
the missing parts are empty (a pending chunk without a mark is read again, which is safe).
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cdc_platform.errors import SnapshotError
from cdc_platform.sink.lake_files import LakeFile

__all__ = ["STATE_VERSION", "PendingChunk", "SnapshotState", "TableCounts"]

STATE_VERSION = 1


@dataclass(frozen=True, slots=True)
class PendingChunk:
    """A chunk about to commit: its batch, its unique mark (None in files written before
    marks) and where the snapshot stands once it landed."""

    batch_seq: int
    chunk: int | None
    index: int
    after: list[Any] | None

    @classmethod
    def new(cls, batch_seq: int, index: int, after: list[Any] | None) -> PendingChunk:
        """A chunk about to commit as batch ``batch_seq``, with its unique mark (a random
        62-bit number: no other commit carries it)."""
        return cls(batch_seq, secrets.randbits(62), index, after)

    def to_json(self) -> dict[str, Any]:
        """Plain JSON."""
        return {
            "batch_seq": self.batch_seq,
            "chunk": self.chunk,
            "index": self.index,
            "after": self.after,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PendingChunk:
        """The inverse of :meth:`to_json`."""
        mark = data.get("chunk")
        return cls(
            int(data.get("batch_seq", 0)),
            None if mark is None else int(mark),
            int(data["index"]),
            data.get("after"),
        )


@dataclass(slots=True)
class TableCounts:
    """What the snapshot copied of one table so far, for its progress."""

    rows_read: int = 0
    estimated_rows: int = 0
    chunks: int = 0

    def to_json(self) -> dict[str, int]:
        """Plain JSON."""
        return {
            "rows_read": self.rows_read,
            "estimated_rows": self.estimated_rows,
            "chunks": self.chunks,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TableCounts:
        """The inverse of :meth:`to_json` (a missing count is 0)."""
        return cls(
            int(data.get("rows_read", 0)),
            int(data.get("estimated_rows", 0)),
            int(data.get("chunks", 0)),
        )


@dataclass(slots=True)
class SnapshotState:
    """Where a snapshot of ``tables`` stands: the table at ``index``, after the key ``after``
    (None: from its start); ``pending``: a chunk whose commit may or may not have landed;
    ``ended``: tables given up, with why; ``progress``: counts per table."""

    destination: str
    tables: list[str]
    index: int = 0
    after: list[Any] | None = None
    pending: PendingChunk | None = None
    ended: dict[str, str] = field(default_factory=dict)
    progress: dict[str, TableCounts] = field(default_factory=dict)

    def advance(self, index: int, after: list[Any] | None) -> None:
        """Stand at table ``index`` after key ``after``, with no chunk pending."""
        self.index, self.after, self.pending = index, after, None

    def end(self, table: str, reason: str) -> None:
        """Give up the current table (``table``) with ``reason``; go on with the next one."""
        self.ended[table] = reason
        self.advance(self.index + 1, None)

    def to_json(self) -> dict[str, Any]:
        """The stored form (format ``v`` 1)."""
        return {
            "v": STATE_VERSION,
            "destination": self.destination,
            "tables": list(self.tables),
            "index": self.index,
            "after": self.after,
            "pending": None if self.pending is None else self.pending.to_json(),
            "ended": dict(self.ended),
            "progress": {table: counts.to_json() for table, counts in self.progress.items()},
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SnapshotState:
        """The state in ``data``, leniently: what a reader of the progress needs (no version
        or destination check; see :meth:`load` for the runner's)."""
        pending = data.get("pending")
        return cls(
            str(data.get("destination", "")),
            [str(t) for t in data.get("tables", [])],
            int(data.get("index", 0)),
            data.get("after"),
            None if pending is None else PendingChunk.from_json(pending),
            {str(t): str(r) for t, r in (data.get("ended") or {}).items()},
            {str(t): TableCounts.from_json(c) for t, c in (data.get("progress") or {}).items()},
        )

    @classmethod
    def load(cls, file: LakeFile, destination: str) -> SnapshotState | None:
        """The state of ``destination``'s snapshot in ``file``; None when none is under way.
        SnapshotError for a file of another format or destination."""
        data = file.read_json()
        if data is None:
            return None
        if (
            not isinstance(data, dict)
            or data.get("v") != STATE_VERSION
            or data.get("destination") != destination
        ):
            raise SnapshotError(f"{file}: not a snapshot state of {destination!r}")
        return cls.from_json(data)

    def save(self, file: LakeFile) -> None:
        """Write the whole state at once (see :class:`LakeFile`)."""
        file.write_json(self.to_json())
