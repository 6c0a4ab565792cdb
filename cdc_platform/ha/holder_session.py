"""Whether the last other holder's ZooKeeper session ended, told by its member node's deletion.

ZooKeeper deletes a session's ephemeral nodes when the session ends, and a holder joined the
cluster (its ephemeral member node) before it could create the running node. So once the
running node is gone, the deletion of the holder's member node shows that its session ended
(or that the holder is closing it): nobody is left to give the first chance to, and the
switch delay can be waived. Both deletions arrive as watch events, so the decision takes no
extra round trip. A member node that is absent or owned by another session when the holder is
first seen cannot be attributed and never counts. Fencing does not depend on any of this: the
new epoch fences the old holder either way.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from kazoo.exceptions import KazooException
from kazoo.protocol.states import EventType

from cdc_platform.ha.running_node import UNKNOWN_HOLDER, RunningData

__all__ = ["HolderSessionWatch"]


class HolderSessionWatch:
    """Watches the member node of the last other holder seen; kazoo threads, never blocks."""

    def __init__(self, cluster_path: str, run_id: str, on_gone: Callable[[], None]) -> None:
        self.cluster_path = cluster_path
        self.run_id = run_id
        self.on_gone = on_gone
        """Called (without locks held) when the watched member node is deleted."""
        self._lock = threading.Lock()
        self._key: tuple[str, int] | None = None
        self._owned = False
        self._gone = False

    @property
    def address(self) -> str:
        """The address of the holder watched, or '?'."""
        with self._lock:
            return self._key[0] if self._key is not None else "?"

    def gone(self) -> bool:
        """True once the watched holder's member node (of its session) was deleted."""
        with self._lock:
            return self._gone

    def note(self, data: RunningData | None, stat: Any, client: Any) -> None:
        """The running node was seen with ``data``: start watching a new other holder."""
        if data is None or data is UNKNOWN_HOLDER or data.run_id == self.run_id:
            return
        if "/" in data.address or client is None:
            return  # not a member name this version writes
        key = (data.address, int(stat.ephemeralOwner))
        with self._lock:
            if key == self._key:
                return
            self._key, self._owned, self._gone = key, False, False

        def went(event: Any) -> None:
            if event.type == EventType.DELETED:
                self._went(key)

        def seen(result: Any) -> None:
            found = result.value if result.successful() else None
            with self._lock:
                if self._key == key:
                    self._owned = found is not None and int(found.ephemeralOwner) == key[1]

        try:
            client.exists_async(f"{self.cluster_path}/{key[0]}", watch=went).rawlink(seen)
        except (KazooException, OSError):
            return  # not watched: the delay stands

    def _went(self, key: tuple[str, int]) -> None:
        with self._lock:
            if key != self._key or not self._owned:
                return
            self._gone = True
        self.on_gone()
