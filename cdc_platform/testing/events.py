"""Build plausible change-event streams for tests without a binlog.

Positions, transaction starts and GTID states advance the way a real server's would, so code
that orders, acks or resumes by them (store, sink, recovery) can be tested on made-up data.
"""

from __future__ import annotations

import json
import re
from types import SimpleNamespace
from typing import Any

from cdc_platform.events import (
    BinlogPosition,
    ChangeEvent,
    EventKind,
    Op,
    Transaction,
)

__all__ = ["EventBuilder", "library_event"]


def library_event(cls: type[Any], pos: int, size: int, **fields: Any) -> Any:
    """A mysql-replication event object of class ``cls`` ending at ``pos`` (``size`` bytes),
    with ``fields`` set, made without a packet to parse: what the source's transaction
    assembler reads of an event, for its unit tests."""
    event = object.__new__(cls)  # no __init__: it would parse a packet
    event.packet = SimpleNamespace(log_pos=pos, event_size=size, server_id=7)
    event.timestamp = 1_700_000_000
    for name, value in fields.items():
        setattr(event, name, value)
    return event


_FILE_NUMBER = re.compile(r"^(.*?)(\d+)$")


class EventBuilder:
    """Makes transactions (rows + COMMIT) and DDL events at increasing binlog positions.

    Every binlog event is ``event_length`` bytes long, each transaction gets the next GTID
    ``domain-server_id-n`` and each row a new primary key, so every event is distinct.
    """

    def __init__(
        self,
        *,
        file: str = "mysql-bin.000001",
        pos: int = 4,
        server_id: int = 1,
        domain: int = 0,
        db: str = "shop",
        table: str = "orders",
        event_length: int = 100,
        timestamp: int = 1_700_000_000,
    ) -> None:
        self._file = file
        self._pos = pos
        self._server_id = server_id
        self._domain = domain
        self._db = db
        self._table = table
        self._event_length = event_length
        self._timestamp = timestamp
        self._gtid_seq = 0
        self._gtid_set: str | None = None
        self._next_id = 1

    @property
    def position(self) -> BinlogPosition:
        """End of the last event built: where a reader would continue."""
        return BinlogPosition(self._file, self._pos)

    def transaction(
        self,
        rows: int = 1,
        *,
        table: str | None = None,
        op: Op = Op.INSERT,
        payload: int = 0,
    ) -> list[ChangeEvent]:
        """``rows`` row events and the COMMIT; ``payload`` pads each row image (bytes)."""
        txn = self._begin()
        events: list[ChangeEvent] = []
        for index in range(rows):
            row_id = self._next_id
            self._next_id += 1
            image = json.dumps({"id": row_id, "pad": "x" * payload})
            events.append(
                ChangeEvent(
                    kind=EventKind.ROW,
                    txn=txn,
                    position=self._advance(),
                    index=index,
                    db=self._db,
                    table=table or self._table,
                    op=op,
                    pk=json.dumps({"id": row_id}),
                    before=None if op is Op.INSERT else image,
                    after=None if op is Op.DELETE else image,
                )
            )
        events.append(
            ChangeEvent(kind=EventKind.COMMIT, txn=txn, position=self._advance(), index=rows)
        )
        return events

    def ddl(self, statement: str = "ALTER TABLE orders ADD COLUMN note TEXT") -> ChangeEvent:
        """A DDL event: its own transaction, as the server logs it."""
        txn = self._begin()
        return ChangeEvent(
            kind=EventKind.DDL,
            txn=txn,
            position=self._advance(),
            index=0,
            db=self._db,
            op=Op.DDL,
            ddl=statement,
        )

    def rotate(self) -> None:
        """Continue in the next binlog file (same name, number + 1), as after a log rotation."""
        match = _FILE_NUMBER.match(self._file)
        if match is None:
            raise ValueError(f"binlog file name {self._file!r} does not end in a number")
        prefix, number = match.groups()
        self._file = f"{prefix}{int(number) + 1:0{len(number)}d}"
        self._pos = 4

    def _begin(self) -> Transaction:
        self._gtid_seq += 1
        self._timestamp += 1
        txn = Transaction(
            start=self.position,
            gtid=f"{self._domain}-{self._server_id}-{self._gtid_seq}",
            gtid_set_before=self._gtid_set,
            server_id=self._server_id,
            timestamp=self._timestamp,
        )
        self._gtid_set = txn.gtid_set_after
        return txn

    def _advance(self) -> BinlogPosition:
        self._pos += self._event_length
        return self.position
