"""How long the server keeps the binlog a restart needs: the warning before a binlog gap.

A restart reads from the checkpoint, so the binlog file holding the last committed
transaction must still be on the server. The server purges a file once it is older than its
retention (``binlog_expire_logs_seconds``, else ``expire_logs_days``; also by hand, with
``PURGE BINARY LOGS``, which nothing can foresee). A file is at least as young as the
newest transaction in it, so ``retention - (now - committed source time)``, the headroom, is
a lower bound of the time left before the checkpoint's file may go: a destination that is
stopped, or that commits slower than the server writes, sees it shrink by one second a
second. It is the gauge ``cdc_binlog_retention_headroom_seconds`` and a warning once it falls
below half the retention (docs/operations.md).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable

__all__ = ["RetentionHeadroom"]

log = logging.getLogger("cdc_platform.source")

_REASK_SECONDS = 600.0
"""The retention is a server setting a DBA may change: asked again this often."""
_RETRY_SECONDS = 60.0
"""While it cannot be asked (the server is down), asked again this often."""


class RetentionHeadroom:
    """The headroom of the committed position against the server's binlog retention."""

    def __init__(self, retention: Callable[[], float | None], where: Callable[[], str]) -> None:
        """``retention``: the server's binlog retention in seconds (0: for ever; None: it could
        not be asked); ``where`` names the server in the warning."""
        self._retention = retention
        self._where = where
        self._known: float | None = None
        self._asked_at = -math.inf
        self._warned = False

    def retention(self, now: float) -> float | None:
        """The server's retention, asked at most every ten minutes (every minute until known)."""
        wait = _RETRY_SECONDS if self._known is None else _REASK_SECONDS
        if now - self._asked_at >= wait:
            self._asked_at = now
            asked = self._retention()
            if asked is not None:
                self._known = asked
        return self._known

    def headroom(self, committed_source_time: float | None, now: float) -> float | None:
        """Seconds before the checkpoint's binlog may be purged at the latest (``inf`` when
        the server keeps binlogs for ever); None before the first commit or while the
        retention is unknown."""
        retention = self.retention(now)
        if committed_source_time is None or retention is None:
            return None
        if retention <= 0:
            return math.inf
        left = retention - max(0.0, now - committed_source_time)
        if left < retention / 2 and not self._warned:
            self._warned = True
            log.warning(
                "the checkpoint is %.0f s behind %s, whose binlog retention is %.0f s: "
                "%.0f s are left before the binlog a restart needs may be purged (then only "
                "a new snapshot can restart this destination); let it catch up, or keep the "
                "binlogs longer",
                now - committed_source_time,
                self._where(),
                retention,
                max(0.0, left),
            )
        elif left >= retention / 2:
            self._warned = False  # caught up again: warn again next time
        return left
