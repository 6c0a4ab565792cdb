"""The id watch's transactions: its changes as whole transactions of ChangeEvents.

Every transaction is ROW events then a COMMIT whose position holds the watch state after
them (:class:`~.state.WatchPosition`: the last id per table, and the transaction number), so
the change log's last COMMIT is where a restart resumes.
"""

from __future__ import annotations

from collections.abc import Sequence

from cdc_platform.events import BinlogPosition, ChangeEvent, EventKind, Transaction
from cdc_platform.infra.clock import Clock
from cdc_platform.source.id_watch.state import Change, WatchPosition
from cdc_platform.source.id_watch.tables import WatchedTable
from cdc_platform.source.reading.table_description import SnapshotTable

__all__ = ["ROW_FILE", "Emitter"]

ROW_FILE = "id_watch"
"""``binlog_file`` of every row this source writes (``binlog_pos`` is its transaction number)."""


class Emitter:
    """Builds whole transactions of ChangeEvents and advances the position with them."""

    def __init__(self, position: WatchPosition, server_id: int, wall: Clock) -> None:
        self.last_ids = dict(position.last_ids)
        """Where the watch is; may run ahead of :attr:`emitted` while it reads known rows."""
        self.emitted = dict(position.last_ids)
        """The last ids carried by the newest COMMIT emitted."""
        self.txn = position.txn
        self._server_id = server_id
        self._wall = wall

    def position(self) -> WatchPosition:
        return WatchPosition(dict(self.last_ids), self.txn)

    def transaction(
        self, table: WatchedTable | None, changes: Sequence[Change], *, last_id: int | None = None
    ) -> list[ChangeEvent]:
        """ROW events for ``changes`` (of ``table``) then a COMMIT whose position holds the
        state after them (``last_id`` moves the table's watch position)."""
        before = WatchPosition(dict(self.emitted), self.txn)
        if last_id is not None:
            assert table is not None
            self.last_ids[table.name] = last_id
        self.emitted = dict(self.last_ids)
        self.txn += 1
        number = self.txn
        txn = Transaction(
            start=BinlogPosition(before.file(), number),
            gtid=None,
            gtid_set_before=None,
            server_id=self._server_id,
            timestamp=int(self._wall.time()),
        )
        row_position = BinlogPosition(ROW_FILE, number)
        events: list[ChangeEvent] = []
        if table is not None:
            events = self._rows(table.spec, txn, row_position, changes)
        events.append(
            ChangeEvent(
                kind=EventKind.COMMIT,
                txn=txn,
                position=BinlogPosition(self.position().file(), number),
                index=len(events),
            )
        )
        return events

    @staticmethod
    def _rows(
        spec: SnapshotTable, txn: Transaction, position: BinlogPosition, changes: Sequence[Change]
    ) -> list[ChangeEvent]:
        return [
            ChangeEvent(
                kind=EventKind.ROW,
                txn=txn,
                position=position,
                index=index,
                db=spec.db,
                table=spec.table,
                op=change.op,
                pk=change.pk,
                before=change.pk if change.after is None else None,
                after=change.after,
                columns=spec.columns_json,
            )
            for index, change in enumerate(changes)
        ]
