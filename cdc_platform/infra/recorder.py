"""What the engine tells an operator's metrics: the recorder interface, and its no-op default.

The engine measures its progress where it happens (the change-log commit, the ring buffer,
the lease supervisor, the source's reconnects) and reports it to a :class:`MetricsRecorder`.
The base class does nothing, so code that runs without metrics (tests, benchmarks, the
snapshot command) pays nothing; the Prometheus one (:mod:`cdc_platform.runtime.prometheus`)
overrides every method. No engine module below the runtime imports prometheus.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["NULL_RECORDER", "MetricsRecorder"]


class MetricsRecorder:
    """One destination's figures; every method is cheap and safe from any thread."""

    def committed(
        self, *, ops: Mapping[str, int], transactions: int, seconds: float, at: float
    ) -> None:
        """A change-log commit landed at ``at`` (epoch seconds) after ``seconds`` of
        committing, with ``ops`` rows per operation (``c``, ``u``, ``d``, ``r``, ``ddl``) and
        ``transactions`` source transactions completed."""

    def caught_up(self, source_time: float) -> None:
        """Everything the source wrote up to ``source_time`` (epoch seconds) is committed."""

    def buffer(self, fill_ratio: float) -> None:
        """The ring buffer is this full (0..1, the larger of items and bytes)."""

    def reconnected(self, count: int = 1) -> None:
        """The binlog stream was lost and re-established ``count`` more times."""

    def lease(self, *, held: bool, epoch: int | None) -> None:
        """This process holds (or no longer holds) the destination's lease at ``epoch``."""

    def xa_prepared(self, age_seconds: float | None) -> None:
        """The oldest prepared, not yet committed XA transaction held has waited
        ``age_seconds`` (None: none is held)."""

    def retention_headroom(self, seconds: float | None) -> None:
        """The checkpoint's binlog may be purged ``seconds`` from now at the latest (``inf``:
        the server keeps binlogs for ever; None: not known)."""

    def snapshot(self, progress: float) -> None:
        """A running snapshot's progress, 0..1 (tables done plus the current table's share
        of its estimated rows); 1 when it finished."""


NULL_RECORDER = MetricsRecorder()
"""The shared no-op recorder (it holds no state)."""
