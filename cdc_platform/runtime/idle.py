"""When a stream is idle: the rules of ``--exit-when-idle`` and of the idle checkpoint.

An idle server sends heartbeats (``Transaction.idle``); the commit loop treats a batch of
heartbeats only as "caught up" and stops a run started with ``--exit-when-idle`` once the
stream has been quiet long enough.
"""

from __future__ import annotations

from cdc_platform.store import Batch

__all__ = ["IDLE_WITHOUT_HEARTBEAT_FACTOR", "heartbeats_only", "idle_long_enough"]

IDLE_WITHOUT_HEARTBEAT_FACTOR = 4.0
"""A stream that has sent no heartbeat yet (still connecting, or catching up on a busy
machine) counts as idle only after this many times ``exit_when_idle``."""


def idle_long_enough(quiet: float, exit_when_idle: float, *, heard_idle: bool) -> bool:
    """Whether ``--exit-when-idle`` may stop the run: quiet that long and the server said it
    had nothing more (a heartbeat), or quiet much longer (sources without heartbeats)."""
    if heard_idle:
        return quiet >= exit_when_idle
    return quiet >= exit_when_idle * IDLE_WITHOUT_HEARTBEAT_FACTOR


def heartbeats_only(batch: Batch) -> bool:
    """True when every event of ``batch`` is an idle server's heartbeat (no change, no
    transaction): see ``Transaction.idle``."""
    return all(event.txn.idle for event in batch.events)
