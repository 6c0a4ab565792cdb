"""State watch: keys with values, every change numbered, a bounded history.

A store keeps the current value of each key and the last ``history`` change events, numbered
by one counter for the whole store (like etcd's revision). A watcher that knows the index of
the last event it saw asks for :meth:`StateStore.events` after it and gets exactly the events it
missed; when some of them were already dropped from the history (or the store was reset
behind its back) it gets :class:`cdc_platform.errors.TooFarBehindError` and re-lists with
:meth:`StateStore.listing`, whose index is where to continue. Nothing is ever missed silently.

Writers may pass a ``fence`` (the lease epoch): a write with a fence older than the one stored
for that key is refused, so a deposed holder's late status update cannot overwrite the new
holder's.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections import deque
from dataclasses import dataclass
from enum import StrEnum

from cdc_platform.errors import TooFarBehindError
from cdc_platform.infra.clock import SYSTEM_CLOCK, Clock

__all__ = ["Entry", "EventKind", "Listing", "MemoryStateStore", "StateStore", "WatchEvent"]

DEFAULT_HISTORY = 1000


class EventKind(StrEnum):
    """What happened to a key."""

    PUT = "put"
    DELETE = "delete"


@dataclass(frozen=True, slots=True)
class WatchEvent:
    """One numbered change."""

    index: int
    key: str
    kind: EventKind
    value: str | None
    at: float
    """Wall-clock seconds of the change (the store's clock)."""


@dataclass(frozen=True, slots=True)
class Entry:
    """A key's current value and the index of the event that set it."""

    key: str
    value: str
    index: int
    fence: int | None = None
    updated_at: float | None = None


@dataclass(frozen=True, slots=True)
class Listing:
    """Every entry under a prefix, as of ``index``: watch on with ``events(prefix, index)``."""

    entries: list[Entry]
    index: int


class StateStore(ABC):
    """Current values plus a bounded, numbered history of changes."""

    @abstractmethod
    def put(self, key: str, value: str, *, fence: int | None = None) -> int | None:
        """Set ``key``; the new event's index, or None when refused by the fence."""

    @abstractmethod
    def delete(self, key: str, *, fence: int | None = None) -> int | None:
        """Remove ``key``; the event's index, or None when absent or refused by the fence."""

    @abstractmethod
    def get(self, key: str) -> Entry | None:
        """The current entry of ``key``."""

    @abstractmethod
    def listing(self, prefix: str = "") -> Listing:
        """All entries whose key starts with ``prefix``, and the index they are current at."""

    @abstractmethod
    def events(self, prefix: str, since: int, limit: int = 1000) -> list[WatchEvent]:
        """Events after index ``since`` under ``prefix``, oldest first, at most ``limit``.

        Raises TooFarBehindError when events after ``since`` were dropped from the history.
        """

    @abstractmethod
    def index(self) -> int:
        """The index of the newest event (0 before the first)."""

    def close(self) -> None:  # noqa: B027 (nothing to close by default)
        """Release connections."""


def _refused(current: int | None, fence: int | None) -> bool:
    return fence is not None and current is not None and fence < current


class MemoryStateStore(StateStore):
    """The store in memory, for one process (tests, the engine's own observers)."""

    def __init__(self, history: int = DEFAULT_HISTORY, *, clock: Clock = SYSTEM_CLOCK) -> None:
        if history < 1:
            raise ValueError("history must be >= 1")
        self._history = history
        self._clock = clock
        self._entries: dict[str, Entry] = {}
        self._events: deque[WatchEvent] = deque()
        self._index = 0
        self._floor = 0
        """Highest index dropped from the history."""
        self._changed = threading.Condition()

    def _append(self, key: str, kind: EventKind, value: str | None) -> int:
        self._index += 1
        self._events.append(WatchEvent(self._index, key, kind, value, self._clock.time()))
        while len(self._events) > self._history:
            self._floor = self._events.popleft().index
        return self._index

    def put(self, key: str, value: str, *, fence: int | None = None) -> int | None:
        """Set ``key`` unless the fence refuses it."""
        with self._changed:
            current = self._entries.get(key)
            if _refused(current.fence if current else None, fence):
                return None
            index = self._append(key, EventKind.PUT, value)
            kept = fence if fence is not None else (current.fence if current else None)
            self._entries[key] = Entry(key, value, index, kept, self._clock.time())
            return index

    def delete(self, key: str, *, fence: int | None = None) -> int | None:
        """Remove ``key`` unless absent or refused."""
        with self._changed:
            current = self._entries.get(key)
            if current is None or _refused(current.fence, fence):
                return None
            del self._entries[key]
            return self._append(key, EventKind.DELETE, None)

    def get(self, key: str) -> Entry | None:
        """The current entry."""
        with self._changed:
            return self._entries.get(key)

    def listing(self, prefix: str = "") -> Listing:
        """Entries under ``prefix`` and the current index."""
        with self._changed:
            entries = [e for k, e in sorted(self._entries.items()) if k.startswith(prefix)]
            return Listing(entries, self._index)

    def events(self, prefix: str, since: int, limit: int = 1000) -> list[WatchEvent]:
        """Kept events after ``since``; TooFarBehindError when some were dropped."""
        with self._changed:
            if since < self._floor or since > self._index:
                oldest = self._events[0].index if self._events else 0
                raise TooFarBehindError(since, oldest, self._index)
            found = [e for e in self._events if e.index > since and e.key.startswith(prefix)]
            return found[:limit]

    def index(self) -> int:
        """The newest index."""
        with self._changed:
            return self._index
