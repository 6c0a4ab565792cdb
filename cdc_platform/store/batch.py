"""What the event store hands out and reports: batches of whole transactions (or a chunk of
one too large to wait for), the key an ack names, the fill statistics, and its two errors."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypeAlias

from cdc_platform.errors import StoreError
from cdc_platform.events import ChangeEvent, ResumePosition

__all__ = ["Batch", "EventKey", "PartialPutError", "StoreClosedError", "StoreStats"]

EventKey: TypeAlias = tuple[str, int, int, int]
"""An event's :meth:`ChangeEvent.sort_key`, enough to name it in :meth:`EventStore.ack`."""


class StoreClosedError(StoreError):
    """The store was closed; blocked callers are woken with this and later calls raise it."""

    def __init__(self) -> None:
        super().__init__("the event store is closed")


class PartialPutError(StoreError):
    """A put of a list larger than the store stored only its first ``stored`` events in time.

    Such a list goes in piece by piece as room frees, so a timed put can end half-way; the
    caller must put ``events[stored:]`` next, not the whole list again.
    """

    def __init__(self, stored: int, total: int) -> None:
        self.stored = stored
        self.total = total
        super().__init__(
            f"put timed out after storing {stored} of {total} events (a list larger than the "
            f"store goes in pieces); put events[{stored}:] next"
        )


@dataclass(frozen=True, slots=True)
class Batch:
    """What one get hands out: whole transactions, or a chunk of one too large to wait for.

    Every non-empty batch ends where it may be acked: at a transaction boundary or, when
    ``partial``, at the last event of the chunk. A batch may start inside a transaction (the
    rest of one delivered in chunks before).
    """

    events: tuple[ChangeEvent, ...]
    partial: bool = False
    """True when the batch ends inside a transaction (a chunk of one larger than the store)."""
    arrived: float = field(default=0.0, compare=False)
    """When its first event was put (``time.monotonic``): how long the batch has waited."""
    size_bytes: int = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "size_bytes", sum(event.size for event in self.events))

    @property
    def first(self) -> ChangeEvent | None:
        """The first event, None when empty."""
        return self.events[0] if self.events else None

    @property
    def last(self) -> ChangeEvent | None:
        """The last event, None when empty."""
        return self.events[-1] if self.events else None

    @property
    def ack_point(self) -> ChangeEvent | None:
        """The event to ack once the batch is committed: its last event (see the class doc)."""
        return self.last

    def resume_position(self) -> ResumePosition | None:
        """Where to restart reading once this batch is committed; None when empty."""
        return None if self.ack_point is None else self.ack_point.resume_after()


@dataclass(frozen=True, slots=True)
class StoreStats:
    """A consistent snapshot for buffer-fill metrics; the ``*_count`` fields only ever grow."""

    items: int
    """Events stored and not yet acked (handed out or not)."""
    bytes: int
    """Their total :attr:`ChangeEvent.size`."""
    capacity_items: int
    capacity_bytes: int | None
    """The byte limit in MEMSIZE mode; None in ITEMSIZE mode, where bytes are not limited."""
    put_count: int
    get_count: int
    """Events handed out by get, counting again those handed out again after a rollback."""
    ack_count: int
