"""The id-watch source's state: its position, the known rows, the stable-prefix cut, the list timer.

Pure logic and one change-log read, apart from the polling source in :mod:`.id_watch`, so it
is tested without a server (tests/unit/test_id_watch.py).
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import pyarrow as pa
from deltalake import DeltaTable, QueryBuilder
from deltalake.exceptions import DeltaError, TableNotFoundError

from cdc_platform.errors import CheckpointError, SourceError
from cdc_platform.events import Op, ResumePosition
from cdc_platform.infra.clock import Clock

__all__ = [
    "POSITION_FORMAT_VERSION",
    "Change",
    "KnownState",
    "ListSchedule",
    "WatchPosition",
    "WatchRow",
    "load_known_state",
    "next_list_delay",
    "stable_prefix",
]

POSITION_FORMAT_VERSION = 1
"""Version of the watch state stored in ``ResumePosition.file``."""

_POSITION_PREFIX = "id_watch:"
LOAD_BATCH_ROWS = 8192
"""Rows of (key, digest) handed from the change-log query to Python at a time at start."""


# -- position ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class WatchPosition:
    """Per-table last emitted id and the number of transactions emitted so far.

    Serialised into a ResumePosition: ``file`` is ``id_watch:`` + JSON of the last ids,
    ``pos`` the transaction number. Rows carry ``binlog_file = "id_watch"`` and
    ``binlog_pos`` = their transaction number, so (file, pos, index) identifies each row.
    """

    last_ids: Mapping[str, int] = field(default_factory=dict)
    txn: int = 0

    def file(self) -> str:
        """The ``file`` part: the last ids as versioned JSON."""
        body = json.dumps(
            {"v": POSITION_FORMAT_VERSION, "last": dict(sorted(self.last_ids.items()))},
            separators=(",", ":"),
            sort_keys=True,
        )
        return _POSITION_PREFIX + body

    def to_resume(self) -> ResumePosition:
        """As stored in the change log's commits."""
        return ResumePosition(file=self.file(), pos=self.txn)

    @classmethod
    def from_resume(cls, resume: ResumePosition) -> WatchPosition:
        """Parse what :meth:`to_resume` (or an event's ``resume_after``) produced.

        ``skip_events`` needs no handling: a position inside a transaction carries the state
        from before it, and the rows of that transaction already committed are in the known
        state, so reading them again emits nothing.

        Raises:
            CheckpointError: the position was not written by this source (e.g. the change
                log was filled by the binlog source) or is unreadable.
        """
        if not resume.file.startswith(_POSITION_PREFIX):
            raise CheckpointError(
                f"the change log resumes at {resume}, which is not an id_watch position: it "
                "was written by another source mode. Give the id_watch destination its own "
                "change-log table (sink.table) or a new destination name."
            )
        try:
            data = json.loads(resume.file[len(_POSITION_PREFIX) :])
            version = data.get("v")
            if version != POSITION_FORMAT_VERSION:
                raise ValueError(f"unsupported id_watch position format version {version!r}")
            last = {str(k): int(v) for k, v in data["last"].items()}
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise CheckpointError(f"unreadable id_watch position {resume.file!r}: {exc}") from None
        return cls(last, resume.pos)


# -- pure logic --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class WatchRow:
    """One row read by the watch: its id, primary key and image JSON, and whether its created
    time is older than the stability delay."""

    id: int
    pk: str
    image: str
    stable: bool


def stable_prefix(rows: Sequence[WatchRow]) -> tuple[list[WatchRow], bool]:
    """The rows before the first unstable one, and whether an unstable row cut the page.

    Everything after an unstable row waits too, even if stable itself: a lower id may still be
    uncommitted, and emitting a higher one would move ``last`` past it for good.
    """
    for index, row in enumerate(rows):
        if not row.stable:
            return list(rows[:index]), True
    return list(rows), False


def _digest(image: str) -> bytes:
    """16 bytes that tell images apart (not a security measure); the same function as the
    change-log query's ``digest(after, 'md5')``, so the start never reads images."""
    return hashlib.md5(image.encode(), usedforsecurity=False).digest()


@dataclass(frozen=True, slots=True)
class Change:
    """One row change to emit: op, key JSON, and the after image (None for deletes)."""

    op: Op
    pk: str
    after: str | None


class KnownState:
    """What the change log holds per table: primary-key JSON -> digest of the image JSON.

    About 100 bytes per row in memory (the key text and a 16-byte digest), never the images.
    """

    def __init__(self) -> None:
        self._tables: dict[str, dict[str, bytes]] = {}

    def table(self, name: str) -> dict[str, bytes]:
        """The state of one ``db.table`` (created empty)."""
        return self._tables.setdefault(name, {})

    def size(self, name: str) -> int:
        """Rows known for ``db.table``."""
        return len(self._tables.get(name, {}))

    def diff(self, name: str, rows: Iterable[tuple[str, str]], *, new_op: Op) -> list[Change]:
        """Changes that bring the known state to ``rows`` ((pk, image) pairs) for those keys:
        ``new_op`` for unknown keys, ``r`` for a different image, nothing for the same."""
        known = self.table(name)
        changes: list[Change] = []
        for pk, image in rows:
            digest = known.get(pk)
            if digest is None:
                changes.append(Change(new_op, pk, image))
            elif digest != _digest(image):
                changes.append(Change(Op.SNAPSHOT, pk, image))
        return changes

    def gone(self, name: str, seen: set[str]) -> list[str]:
        """Known keys of ``db.table`` not in ``seen``, in a stable order."""
        return sorted(pk for pk in self.table(name) if pk not in seen)

    def apply(self, name: str, changes: Iterable[Change]) -> None:
        """Record changes once they are emitted."""
        known = self.table(name)
        for change in changes:
            if change.after is None:
                known.pop(change.pk, None)
            else:
                known[change.pk] = _digest(change.after)


def next_list_delay(interval_minutes: tuple[float, float], rng: random.Random) -> float:
    """Seconds until the next list, uniform in [min, max] minutes (SOFARegistry's ListLoop)."""
    low, high = interval_minutes
    return rng.uniform(low, high) * 60.0


class ListSchedule:
    """When the next full list is due: at once, then after randomized delays."""

    def __init__(
        self, interval_minutes: tuple[float, float], clock: Clock, rng: random.Random
    ) -> None:
        self._interval = interval_minutes
        self._clock = clock
        self._rng = rng
        self.next_at = clock.monotonic()
        """Monotonic time of the next list."""

    def due(self) -> bool:
        """True when a list should run now."""
        return self._clock.monotonic() >= self.next_at

    def listed(self) -> float:
        """A list just finished: schedule the next one; returns its delay in seconds."""
        delay = next_list_delay(self._interval, self._rng)
        self.next_at = self._clock.monotonic() + delay
        return delay


def load_known_state(
    table_uri: str,
    tables: Sequence[str],
    storage_options: dict[str, str] | None = None,
    *,
    batch_rows: int = LOAD_BATCH_ROWS,
) -> KnownState:
    """The digest of the newest image per key of ``tables`` (``db.table``) in the change log
    at ``table_uri``; empty when the table does not exist yet.

    One DataFusion query per table, pruned to the table's partition, that digests the images
    itself and streams (key, digest) in batches of ``batch_rows``: Python never holds an image,
    only the state it keeps anyway plus one batch.

    Raises:
        SourceError: the change log exists but cannot be read.
    """
    state = KnownState()
    try:
        delta = DeltaTable(table_uri, storage_options=storage_options)
    except TableNotFoundError:
        return state
    except (DeltaError, OSError, pa.ArrowException, RuntimeError) as exc:
        raise SourceError(f"id_watch: cannot open the change log to rebuild state: {exc}") from exc
    for name in tables:
        db, table = name.split(".", 1)
        sql = (
            "SELECT pk, h FROM (SELECT pk, op, h, ROW_NUMBER() OVER "  # noqa: S608 (identifiers quoted by the source's quoting, values bound as parameters)
            "(PARTITION BY pk ORDER BY seq DESC) AS rn FROM "
            "(SELECT pk, seq, op, digest(\"after\", 'md5') AS h FROM changes "
            f'WHERE db = {_sql_text(db)} AND "table" = {_sql_text(table)} AND pk IS NOT NULL)) '
            f"WHERE rn = 1 AND op <> '{Op.DELETE.value}' AND h IS NOT NULL"
        )
        known = state.table(name)
        try:
            query = QueryBuilder().register("changes", delta)
            reader = pa.RecordBatchReader.from_stream(query.execute(sql))
            for batch in reader:
                for offset in range(0, batch.num_rows, batch_rows):
                    part = batch.slice(offset, batch_rows)
                    known.update(
                        zip(
                            part.column("pk").to_pylist(),
                            part.column("h").to_pylist(),
                            strict=True,
                        )
                    )
        except Exception as exc:  # DataFusion's errors are plain Exceptions
            raise SourceError(
                f"id_watch: cannot read {name}'s rows from the change log: {exc}"
            ) from exc
    return state


def _sql_text(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"
