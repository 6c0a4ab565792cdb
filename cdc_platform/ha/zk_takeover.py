"""When a ZooKeeper standby may take the running node over, and when it need not wait.

The lease feeds every observation of the running node (its data watch, its own reads) to
:class:`TakeoverWatch`. Canal's rules (:class:`~cdc_platform.ha.running_node.SwitchRules`) turn
them into the time from which a grab may be tried: at once, after ``switch_delay`` or after a
release cool-down. A pending switch delay is waived when the last holder is known gone, for
then nobody is left to give the first chance to:

* its session ended: its member node went with the running node
  (:mod:`cdc_platform.ha.holder_session`);
* its process died: a liveness probe proved it (:mod:`cdc_platform.ha.liveness`); the standby
  then deletes the holder's running node (that run id and epoch only, version-checked) rather
  than wait for the holder's session to expire.

Only a participating process probes (a standby, never an observer such as ``status``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from cdc_platform.errors import LeaseBackendError
from cdc_platform.ha.holder_session import HolderSessionWatch
from cdc_platform.ha.liveness import ProbeFollower
from cdc_platform.ha.running_node import RunningData, SwitchRules
from cdc_platform.ha.zk_nodes import delete_dead_holder
from cdc_platform.ha.zk_session import ZooKeeperSession

__all__ = ["TakeoverWatch"]

log = logging.getLogger("cdc_platform.ha")


class TakeoverWatch:
    """A standby's view of the running node's holder, under the lease's own lock."""

    def __init__(  # noqa: PLR0913 (the lease's lock, rules, session and paths; then settings)
        self,
        lock: threading.RLock,
        rules: SwitchRules,
        session: ZooKeeperSession,
        running_path: str,
        cluster_path: str,
        *,
        probe_timeout: float,
        notify: Callable[[], None],
    ) -> None:
        self._lock = lock
        self.rules = rules
        """Read and changed only under the lock."""
        self._session = session
        self._running_path = running_path
        self._notify = notify
        """The lease's wake-up (something changed in the store); called without the lock."""
        self.participating = False
        """True once this process competes for the lease; observers never probe."""
        self._holder_session = HolderSessionWatch(cluster_path, rules.run_id, self._on_holder_gone)
        self._dead_run_id: str | None = None
        """The run id of a holder a liveness probe proved dead (its node may be deleted)."""
        self._probes = ProbeFollower(rules.run_id, self._on_holder_dead, timeout=probe_timeout)

    @property
    def label(self) -> str:
        """The destination, for messages."""
        return self._session.label

    def observe(self, data: RunningData | None) -> bool:
        """Under the lock: the running node was seen with ``data`` (None: absent). True when a
        pending switch delay was waived just now (then call :meth:`log_waived`, unlocked)."""
        self.rules.observe(data)
        return data is None and self._waive_if_holder_gone()

    def seen(self, data: RunningData | None, stat: Any, client: Any) -> None:
        """Without the lock: watch the session of the holder seen and probe its listener."""
        self._holder_session.note(data, stat, client)
        self.follow(data)

    def follow(self, data: RunningData | None) -> None:
        """Probe the other holder's liveness listener; only a standby (observers never act)."""
        if data is None or not self.participating:
            self._probes.follow(None, -1, None)
        else:
            self._probes.follow(data.run_id, data.epoch, data.liveness)

    def stop(self) -> None:
        """Stop probing (closing)."""
        self._probes.stop()

    def log_waived(self) -> None:
        """Say that the switch delay was skipped."""
        log.info(
            "%s: the running node's holder is gone: taking over without the switch delay",
            self.label,
        )

    # -- kazoo and probe threads: no blocking calls under the lock -------------------------------

    def _on_holder_gone(self) -> None:
        """The last holder's member node went (a kazoo thread): waive a pending delay."""
        with self._lock:
            waived = self._waive_if_holder_gone()
        if waived:
            self.log_waived()
            self._notify()

    def _waive_if_holder_gone(self) -> bool:
        """Under the lock: skip a pending switch delay if the holder's member node went, or a
        liveness probe proved its process gone."""
        holder = self.rules.holder
        dead = holder is not None and holder.run_id == self._dead_run_id
        if not (dead or self._holder_session.gone()) or not self.rules.waiting_for_switch_delay():
            return False
        self.rules.holder_session_ended()
        return True

    def _on_holder_dead(self, run_id: str, epoch: int) -> None:
        """A probe proved the holder's process gone (a probe thread): delete its running node,
        if it is still that holder's (version-checked), and take over without the delay."""
        client = self._session.client
        if client is None:
            return
        with self._lock:
            self._dead_run_id = run_id
        try:
            deleted = delete_dead_holder(
                self._session.op, client, self._running_path, run_id, epoch
            )
            if deleted is not None:
                log.warning(
                    "%s: the process of the holder %s (epoch %d) is gone (its liveness "
                    "listener closed): deleted its running node",
                    self.label,
                    deleted.address,
                    epoch,
                )
        except LeaseBackendError as exc:
            log.warning(
                "%s: could not delete the running node of a dead holder (%s): waiting for "
                "its session to expire",
                self.label,
                exc,
            )
        self._on_holder_gone()
