"""What a supervised node tells others: its lease, config and progress in the state watch, and
its row in the node registry (database lease backend).

The lease supervisor decides *when* (acquired, every commit, every heartbeat, released, gone);
:class:`HolderStatus` knows *what* each entry holds and where it goes (:class:`StatusChannels`).
`cdc-platform status` reads these entries (:mod:`cdc_platform.coordination.status`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cdc_platform.backfill.snapshot import SnapshotProgress
from cdc_platform.errors import CdcError
from cdc_platform.ha.lease import Lease
from cdc_platform.ha.registry import NodeRegistry
from cdc_platform.runtime.runtime_metrics import RuntimeMetrics
from cdc_platform.sink.report import CommitReport
from cdc_platform.watch.keys import state_keys
from cdc_platform.watch.publisher import StatePublisher

__all__ = ["HolderStatus", "StatusChannels"]

log = logging.getLogger("cdc_platform.runtime")

_REGISTRY_MAINTENANCE_EVERY = 10
"""Registry heartbeats between two cleanups of dead nodes (by the active holder)."""


@dataclass(frozen=True)
class StatusChannels:
    """Where a supervised node reports, each optional: the state watch (``publisher``), the
    node registry, the config's content hash and the process's metrics endpoint (published
    with the lease and the status for `status`)."""

    publisher: StatePublisher | None = None
    registry: NodeRegistry | None = None
    config_hash: str | None = None
    metrics_url: str | None = None


class HolderStatus:
    """The entries of destination ``name`` under ``lease``; see the module docstring."""

    def __init__(self, name: str, lease: Lease, channels: StatusChannels) -> None:
        self.name = name
        self.lease = lease
        self.channels = channels
        self._beats = 0
        self._last_commit: dict[str, Any] = {}
        """The newest commit's figures, published with the live ones."""

    def _publish(
        self, kind: str, value: dict[str, Any], *, fence: int | None, urgent: bool
    ) -> None:
        publisher = self.channels.publisher
        if publisher is not None:
            publisher.publish(state_keys(self.name)[kind], value, fence=fence, urgent=urgent)

    def committed(self, report: CommitReport) -> None:
        """Keep the newest commit's figures (published by :meth:`publish_status`)."""
        self._last_commit = {
            "epoch": report.epoch,
            "batch_seq": report.batch_seq,
            "position": str(report.resume),
            "lag_seconds": round(report.lag_seconds, 3),
            "committed_at": time.time(),
            "rows": report.rows,
        }

    def publish_status(
        self,
        epoch: int | None,
        figures: Callable[[], RuntimeMetrics] | None,
        snapshot: SnapshotProgress | None,
    ) -> None:
        """The holder's ``status`` entry for `status`: the newest commit and the live figures
        (``figures``: the streaming runtime's; lag, rows/s, buffer fill), snapshot progress
        and the metrics endpoint."""
        if self.channels.publisher is None or epoch is None:
            return
        value: dict[str, Any] = {"address": self.lease.address, **self._last_commit}
        value["epoch"] = epoch
        if figures is not None:
            live = figures()
            if live.lag_seconds is not None:
                value["lag_seconds"] = round(live.lag_seconds, 3)
            value["source_time"] = live.source_time
            value["rows_per_second"] = round(live.rows_per_second, 1)
            value["buffer_fill"] = round(live.buffer_fill, 4)
        if snapshot is not None:
            value["snapshot"] = {
                "table": snapshot.table,
                "tables": snapshot.tables,
                "rows_written": snapshot.rows_written,
                "progress": round(snapshot.done_fraction, 4),
            }
        if self.channels.metrics_url is not None:
            value["metrics_url"] = self.channels.metrics_url
        value["published_at"] = time.time()
        self._publish("status", value, fence=epoch, urgent=False)

    def heartbeat(self, role: str) -> None:
        """The registry row (database backend); the active holder also cleans up dead nodes
        every few beats. A failure is logged: the next beat tries again."""
        registry = self.channels.registry
        if registry is None:
            return
        lease = self.lease
        try:
            liveness = lease.liveness_address()
            registry.heartbeat(
                self.name,
                lease.address,
                lease.run_id,
                role=role,
                epoch=lease.epoch,
                info={"liveness": liveness} if liveness else None,
            )
            self._beats += 1
            if role == "active" and self._beats % _REGISTRY_MAINTENANCE_EVERY == 0:
                registry.maintain()
        except CdcError as exc:
            log.warning("%s: node registry heartbeat failed: %s", self.name, exc)

    def acquired(self, epoch: int) -> None:
        """The lease entry (held) and the config this holder runs."""
        lease = self.lease
        self._publish(
            "lease",
            {
                "state": "held",
                "destination": self.name,
                "address": lease.address,
                "run_id": lease.run_id,
                "epoch": epoch,
                "backend": lease.backend,
                "since": time.time(),
            },
            fence=epoch,
            urgent=True,
        )
        config_hash = self.channels.config_hash
        if config_hash is not None:
            self._publish(
                "config",
                {"content_hash": config_hash, "address": lease.address, "epoch": epoch},
                fence=epoch,
                urgent=True,
            )

    def released(self, epoch: int) -> None:
        """The lease entry (released) after a run that ended while holding it."""
        self._publish(
            "lease",
            {
                "state": "released",
                "destination": self.name,
                "address": self.lease.address,
                "epoch": epoch,
                "since": time.time(),
            },
            fence=epoch,
            urgent=True,
        )

    def leave(self) -> None:
        """Remove this node's registry row (the process is done with the destination)."""
        registry = self.channels.registry
        if registry is None:
            return
        try:
            registry.leave(self.name, self.lease.address, self.lease.run_id)
        except CdcError as exc:
            log.warning("%s: leaving the node registry failed: %s", self.name, exc)
