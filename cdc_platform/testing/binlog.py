"""Reading a BinlogSource in tests without ever hanging."""

from __future__ import annotations

import threading
from collections.abc import Callable

from cdc_platform.events import ChangeEvent
from cdc_platform.source import BinlogSource

__all__ = ["collect_events"]


def collect_events(
    source: BinlogSource, until: Callable[[list[ChangeEvent]], bool], timeout: float = 30.0
) -> list[ChangeEvent]:
    """Events until ``until`` holds; stops the source after ``timeout`` so nothing hangs."""
    events: list[ChangeEvent] = []
    timer = threading.Timer(timeout, source.stop)
    timer.start()
    stream = source.events()
    try:
        for event in stream:
            events.append(event)
            if until(events):
                break
    finally:
        timer.cancel()
        source.stop()
        stream.close()
    return events
