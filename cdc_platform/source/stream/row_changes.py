"""The rows path of transaction assembly: the change events of one rows event, and the rows an
open transaction holds back until its end event.

A transaction's rows wait for its end event (up to a bound), so a group the binlog never ends
is dropped rather than captured; beyond the bound the transaction streams (the store commits
it in chunks) and can no longer be dropped. The rows of an XA group are held whatever their
size: they are not committed before the server's ``XA COMMIT``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from sys import getsizeof

from cdc_platform.events import (
    EVENT_OVERHEAD_BYTES,
    BinlogPosition,
    ChangeEvent,
    EventKind,
    Op,
    Transaction,
)
from cdc_platform.source.stream.rows_framing import UPDATE, WRITE, RowsFrame
from cdc_platform.source.stream.xa_rows import XaRows
from cdc_platform.source.values import RowDecoder

__all__ = ["HeldRows", "row_changes"]

_HOLD_EVENTS = 4096
_HOLD_BYTES = 16 << 20
"""Rows of an open transaction held back until its end event; a bigger transaction streams
(the store commits it in chunks) and can no longer be dropped if its end never comes."""


def row_changes(  # noqa: PLR0913 (one rows event and where its rows go in their transaction)
    frame: RowsFrame,
    decoder: RowDecoder,
    decoded: Sequence[tuple[str, ...]],
    *,
    txn: Transaction,
    position: BinlogPosition,
    index: int,
    skip: int,
) -> tuple[list[ChangeEvent], int]:
    """The change events of a rows event's ``decoded`` rows, numbered from ``index`` (those
    below ``skip`` were committed before a restart and are left out), and the next index."""
    db, table, columns = decoder.db, decoder.table, decoder.columns_json
    base = EVENT_OVERHEAD_BYTES + len(db) + len(table)
    out: list[ChangeEvent] = []
    append = out.append
    row = EventKind.ROW
    if frame.kind == UPDATE:
        update = Op.UPDATE
        for before, after, pk in decoded:
            if index >= skip:
                size = base + getsizeof(pk) + getsizeof(before) + getsizeof(after)
                append(
                    ChangeEvent(
                        row, txn, position, index, db, table, update, pk, before, after,
                        None, columns, size,
                    )
                )  # fmt: skip
            index += 1
    else:  # a write's image is the row after, a delete's the row before
        op = Op.INSERT if frame.kind == WRITE else Op.DELETE
        inserts = op is Op.INSERT
        for image, pk in decoded:
            if index >= skip:
                size = base + getsizeof(pk) + getsizeof(image)
                old, new = (None, image) if inserts else (image, None)
                append(
                    ChangeEvent(
                        row, txn, position, index, db, table, op, pk, old, new,
                        None, columns, size,
                    )
                )  # fmt: skip
            index += 1
    return out, index


class HeldRows:
    """The rows of the open transaction not yet passed on, and whether it streams.

    An XA group's rows (``hold_all``) are held whatever their size until its XA PREPARE:
    with ``spill``, they go into its held-rows container (:mod:`.xa_rows`), bounded in memory
    from the first row on, and pass to the prepared transaction as they are."""

    def __init__(self, spill: Callable[[], XaRows] | None = None) -> None:
        self.events: list[ChangeEvent] = []
        self.streaming = False
        self._bytes = 0
        self._spill = spill
        self._spilled: XaRows | None = None

    def add(self, rows: list[ChangeEvent], *, hold_all: bool) -> list[ChangeEvent]:
        """What of ``rows`` (and of the rows held before them) to pass on now: nothing while
        the transaction fits the bound (or ``hold_all``, an XA group), everything held once it
        outgrows it (the transaction streams from then on), and ``rows`` while it streams."""
        if self.streaming:
            return rows
        if hold_all and self._spill is not None:
            if self._spilled is None:
                self._spilled = self._spill()
                self._spilled.extend(self.events)
                self.events, self._bytes = [], 0
            self._spilled.extend(rows)
            return []
        events = self.events
        events.extend(rows)
        self._bytes += sum(e.size for e in rows)
        if hold_all or (len(events) < _HOLD_EVENTS and self._bytes < _HOLD_BYTES):
            return []
        self.events, self._bytes = [], 0
        self.streaming = True
        return events

    def take(self) -> list[ChangeEvent]:
        """The held rows, to be passed on with the transaction's end event; empties the hold."""
        held = self.take_held()
        if isinstance(held, list):
            return held
        events = list(held)
        held.close()
        return events

    def take_held(self) -> list[ChangeEvent] | XaRows:
        """The held rows as they are held (an XA group's container, handed on to its prepared
        transaction without a copy); empties the hold."""
        held: list[ChangeEvent] | XaRows = self.events
        if self._spilled is not None:
            held, self._spilled = self._spilled, None
        self.events, self._bytes = [], 0
        return held

    def first_index(self) -> int | None:
        """The index of the first row held (None: nothing held)."""
        if self.events:
            return self.events[0].index
        return None if self._spilled is None else self._spilled.first_index()

    def count(self) -> int:
        """How many rows are held."""
        return len(self.events) + (len(self._spilled) if self._spilled is not None else 0)

    def drop(self) -> None:
        """Forget the held rows and the streaming state (a new transaction or a restart)."""
        self.events, self._bytes = [], 0
        self.streaming = False
        if self._spilled is not None:
            self._spilled.close()
            self._spilled = None
