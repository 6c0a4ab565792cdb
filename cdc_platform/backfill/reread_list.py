"""The list of tables waiting for a re-read after DDL, and noting a batch's DDL on it.

``<lake_root>/<destination>/_reread_tables.json`` (format ``v`` 1) names the tables whose rows
a committed DDL changed without row events (:mod:`cdc_platform.source.stream.ddl_effects`). Every
writer's commit adds to it before the batch commits (:func:`note_rereads`, called by the one
commit protocol of :mod:`.commit`); the re-read (:mod:`.reread`) empties it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Sequence
from typing import Any

from cdc_platform.backfill.swap_follow import followed_swaps
from cdc_platform.errors import SnapshotError
from cdc_platform.events import ChangeEvent
from cdc_platform.sink.destination_lake import DestinationLake
from cdc_platform.sink.lake_files import LakeFile
from cdc_platform.sink.report import ddl_rows
from cdc_platform.sink.table_records import RereadList
from cdc_platform.sink.term import WriteTerm
from cdc_platform.source.filters import TableFilter
from cdc_platform.source.stream.ddl_effects import ddl_effects

__all__ = [
    "RereadRecord",
    "note_rereads",
    "pending_rereads",
    "tables_to_reread",
]

log = logging.getLogger(__name__)

_LOCK = threading.Lock()
"""One writer of a list at a time in this process (the commit observer, the re-read)."""


def tables_to_reread(statements: Iterable[tuple[str, str, str]]) -> list[str]:
    """``db.table`` names to re-read after the DDL rows ``(db, table, statement)`` of a commit.

    Only the table each row is recorded under counts (the source records a statement once
    per captured table it names), so tables outside the filters are never re-read.
    """
    wanted: dict[str, None] = {}
    for db, table, statement in statements:
        for effect in ddl_effects(statement, db):
            if effect.rereads and effect.table == table and (effect.db == db or not db):
                wanted[f"{db}.{table}"] = None
    return list(wanted)


def pending_rereads(lake: DestinationLake) -> set[str]:
    """``db.table`` names whose re-read after DDL is not done yet (a table stays listed until
    its copy is complete): their mirrors wait before that DDL (``apply_changes(held=True)``)."""
    return set(RereadRecord(lake.reread_tables).load())


class RereadRecord:
    """The waiting list in the lake (:class:`~cdc_platform.sink.table_records.RereadList`).

    Each addition gets a new mark, so a table listed again while its copy runs (a second DDL
    the copy's own stream passed) stays listed when that copy's entry is removed.
    """

    def __init__(self, path: LakeFile) -> None:
        self.path = path

    def load(self) -> dict[str, int]:
        """The tables waiting, oldest first, with their marks."""
        return dict(self._read().tables)

    def _read(self) -> RereadList:
        try:
            data: dict[str, Any] | None = self.path.read_json()
        except ValueError as exc:
            raise SnapshotError(
                f"{self.path}: unreadable list of tables to re-read: {exc}"
            ) from None
        return RereadList.from_json(self.path, data)

    def add(self, tables: Iterable[str]) -> None:
        """List ``tables`` (again: with a new mark)."""
        with _LOCK:
            self.path.write_json(self._read().listing(tables).to_json())

    def remove(self, done: dict[str, int]) -> None:
        """Remove the entries ``done`` (name and mark as loaded); a table listed again since
        keeps its newer entry."""
        with _LOCK:
            left = self._read().without(done)
            if left.tables:
                self.path.write_json(left.to_json())
            else:
                self.path.delete()


def note_rereads(term: WriteTerm, events: Sequence[ChangeEvent]) -> tuple[str, ...]:
    """List the tables the batch's DDL changes without row events, before it commits.

    Every writer of a binlog destination in a lake calls this for every batch (through
    :mod:`.commit`): the list is in the lake before the DDL is in the change log, so a mirror
    never applies that DDL without the re-read that follows it. A batch that then fails to
    commit costs at most one needless copy. Returns the tables listed (empty: none).
    """
    if not term.checked_lake or term.config.source.mode != "binlog":
        return ()
    source = term.config.source  # a followed shadow is never re-read, nor a swap it streamed
    shadows = TableFilter(source.include_tables, source.exclude_tables).follows
    tables = tables_to_reread(r for r in ddl_rows(events) if not shadows(r[0], r[1]))
    followed = followed_swaps(term, events) if tables else set()
    tables = [t for t in tables if t not in followed]
    if not tables:
        return ()
    RereadRecord(term.layout.reread_tables).add(tables)
    log.info("%s: %s changed by DDL; listed for a re-read", term.destination, tables)
    return tuple(tables)
