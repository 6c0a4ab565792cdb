"""``ChangeEvent.size`` is what an event really holds in memory, so the store's byte limit is
the memory its events take (not a third less, as when only the strings' lengths counted)."""

from __future__ import annotations

import tracemalloc
from types import SimpleNamespace
from typing import Any, cast

import pytest

from cdc_platform.events import BinlogPosition, ChangeEvent, EventKind, Op, Transaction
from cdc_platform.source.stream.row_changes import row_changes
from cdc_platform.source.stream.rows_framing import UPDATE, WRITE

pytestmark = pytest.mark.unit

ROWS = 2000
TXN = Transaction(BinlogPosition("mysql-bin.000001", 4), "0-1-7", None, 1, 1_700_000_000)
POSITION = BinlogPosition("mysql-bin.000001", 900)
DECODER = cast(Any, SimpleNamespace(db="shop", table="orders", columns_json='[{"name": "id"}]'))


def _image(i: int, text: str) -> str:
    return f'{{"id": {i}, "note": "{text * (i % 40)}", "price": "{i % 1000}.25"}}'


def _traced(build: Any) -> tuple[list[ChangeEvent], int]:
    """The events ``build`` makes and the bytes they (and their strings) hold."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        events: list[ChangeEvent] = build()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    return events, held


@pytest.mark.parametrize("text", ["n", "é", "€", "😀"], ids=["ascii", "latin-1", "bmp", "astral"])
@pytest.mark.parametrize("kind", [WRITE, UPDATE], ids=["insert", "update"])
def test_the_size_of_decoded_rows_covers_their_memory(kind: int, text: str) -> None:
    def build() -> list[ChangeEvent]:
        # Rows as lists, not tuples: freed tuples stay in CPython's free list, which
        # tracemalloc would count as held.
        if kind == UPDATE:
            decoded: Any = [
                [_image(i, text), _image(i + 1, text), f'{{"id": {i}}}'] for i in range(ROWS)
            ]
        else:
            decoded = [[_image(i, text), f'{{"id": {i}}}'] for i in range(ROWS)]
        frame = cast(Any, SimpleNamespace(kind=kind))
        events, _ = row_changes(
            frame, DECODER, decoded, txn=TXN, position=POSITION, index=1000, skip=0
        )
        del decoded
        return events

    events, held = _traced(build)
    accounted = sum(event.size for event in events)
    assert held <= accounted <= held * 1.25, (held, accounted)


@pytest.mark.parametrize("text", ["n", "€"], ids=["ascii", "bmp"])
def test_a_size_left_to_the_event_covers_its_memory(text: str) -> None:
    def build() -> list[ChangeEvent]:
        events = []
        for i in range(ROWS):
            pk, image = f'{{"id": {i}}}', _image(i, text)
            events.append(
                ChangeEvent(EventKind.ROW, TXN, POSITION, 1000 + i, "s", "t", Op.DELETE, pk, image)
            )
        return events

    events, held = _traced(build)
    accounted = sum(event.size for event in events)
    assert held <= accounted <= held * 1.25, (held, accounted)
