"""Prepared XA rows held within a memory budget: the first in memory, the rest spilled to a
local file, read back in order; the budget shared by every prepared transaction."""

from __future__ import annotations

from dataclasses import replace

import pytest

from cdc_platform.events import ChangeEvent, EventKind
from cdc_platform.source.stream.row_changes import HeldRows
from cdc_platform.source.stream.xa_rows import XaBudget, XaRows
from cdc_platform.testing.events import EventBuilder

pytestmark = pytest.mark.unit


def rows(n: int) -> list[ChangeEvent]:
    built = EventBuilder().transaction(n, payload=50)
    return [replace(e, size=100) for e in built if e.kind is EventKind.ROW]


def test_rows_beyond_the_budget_are_spilled_and_read_back_in_order() -> None:
    budget = XaBudget(250)
    first, second = rows(5), rows(3)
    a = XaRows(budget, first[:3])
    assert (budget.in_memory, a.spilled) == (200, 1)
    assert next(iter(a)) == first[0]  # a read stopped midway, then more rows
    a.extend(first[3:])
    assert list(a) == first
    assert len(a) == 5
    b = XaRows(budget, second)  # the budget is shared: nothing left in memory for b
    assert (budget.in_memory, b.spilled) == (200, 3)
    assert list(b) == second
    a.close()
    assert budget.in_memory == 0
    assert list(b) == second
    b.close()


def test_an_xa_group_is_held_in_its_container_from_the_first_row() -> None:
    budget = XaBudget(150)
    held = HeldRows(spill=lambda: XaRows(budget))
    group = rows(4)
    assert held.add(group[:2], hold_all=True) == []
    assert held.add(group[2:], hold_all=True) == []
    assert held.events == []  # nothing in the unbounded list
    assert (held.count(), held.first_index(), budget.in_memory) == (4, 0, 100)
    container = held.take_held()
    assert isinstance(container, XaRows)
    assert list(container) == group
    assert held.count() == 0
    container.close()
    held.add(group, hold_all=True)
    assert held.take() == group  # an XA group ended otherwise: the rows, the file closed
    assert budget.in_memory == 0
