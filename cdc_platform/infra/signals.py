"""Process signals (SIGTERM, SIGINT, SIGHUP) acted on by a thread of their own.

A Python signal handler runs in the main thread between two bytecodes, possibly while that
thread holds a lock: a supervisor's, the serve runner's, or an Event's own condition. A
handler that takes such a lock waits for a thread that will never go on: the process hangs
instead of stopping. So the handler installed here only records the signal and sets an event
that only the dispatch thread waits on; the actions (``request_stop``, a rescan) run on that
thread, where taking a lock is harmless.
"""

from __future__ import annotations

import signal
import threading
from collections import deque
from collections.abc import Callable, Mapping
from types import FrameType
from typing import Any

from cdc_platform.infra.closing import Closing

__all__ = ["SignalRoutes", "stop_signals"]

SignalAction = Callable[[signal.Signals], None]


class SignalRoutes(Closing):
    """While entered, each signal of ``routes`` calls its action on the dispatch thread.

    Must be entered in the main thread (where Python installs handlers); the previous
    handlers are restored on exit.
    """

    def __init__(self, routes: Mapping[signal.Signals, SignalAction]) -> None:
        self._routes = dict(routes)
        self._arrived = threading.Event()
        """Set by the handler alone (the main thread never waits on it or clears it)."""
        self._pending: deque[signal.Signals | None] = deque()
        """Signals not yet acted on; None ends the dispatch thread."""
        self._previous: dict[signal.Signals, Any] = {}
        self._thread = threading.Thread(target=self._dispatch, name="cdc-signals", daemon=True)

    def _handler(self, signum: int, _frame: FrameType | None) -> None:
        self._pending.append(signal.Signals(signum))  # a deque append takes no Python lock
        self._arrived.set()

    def _dispatch(self) -> None:
        while True:
            self._arrived.wait()
            self._arrived.clear()
            while self._pending:
                signum = self._pending.popleft()
                if signum is None:
                    return
                self._routes[signum](signum)

    def __enter__(self) -> SignalRoutes:
        self._thread.start()
        for signum in self._routes:
            self._previous[signum] = signal.signal(signum, self._handler)
        return self

    def close(self) -> None:
        """Restore the previous handlers and end the dispatch thread (leaving ``with``)."""
        # Handlers first: the event set below must not be interrupted by our own handler.
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        self._pending.append(None)
        self._arrived.set()
        self._thread.join(timeout=10)


def stop_signals(
    request_stop: Callable[[str], None], *, on_hup: Callable[[], None] | None = None
) -> SignalRoutes:
    """SIGTERM and SIGINT call ``request_stop("signal SIGTERM")`` (``on_hup``: SIGHUP calls
    it), each on the dispatch thread: the routes of a long-running command."""

    def stop(signum: signal.Signals) -> None:
        request_stop(f"signal {signum.name}")

    routes: dict[signal.Signals, SignalAction] = {signal.SIGTERM: stop, signal.SIGINT: stop}
    if on_hup is not None:
        routes[signal.SIGHUP] = lambda _signum: on_hup()
    return SignalRoutes(routes)
