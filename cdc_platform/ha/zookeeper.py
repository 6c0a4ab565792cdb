"""ZooKeeper lease: Canal's ServerRunningMonitor, with an epoch and a local validity bound.

Layout under ``root`` (default ``/cdc``), per destination::

    destinations/<name>/running          ephemeral: {address, run_id, active, epoch, since}
    destinations/<name>/epoch            persistent: the last epoch handed out
    destinations/<name>/cluster/<address> ephemeral member node (persistent parent)

Acquisition is one multi-op transaction: bump ``epoch`` (version-checked) and create
``running``; so two processes can never get the same epoch, and a failed create leaves the
counter alone. Canal's rules on the data watch of ``running``
(:class:`~cdc_platform.ha.running_node.SwitchRules`):

* deleted, and the last holder was this process (e.g. its session expired and came back): grab
  again at once; deleted with the last holder's session (its member node went too: killed,
  or its session expired): grab at once, as nobody can come back to it; deleted otherwise (a
  holder that lives on deleted it): grab after ``switch_delay`` (anti-flap);
* changed to ``active: false`` for this process (``cdc-platform release``): delete it, stop,
  and stay away for ``release_cooldown`` so a standby takes over (Canal lets the releasing
  node race again after the delay, so a switch-over may land on the same node).

A standby also probes the holder's liveness listener (:mod:`cdc_platform.ha.liveness`): when
the holder's process is proven dead, it deletes the holder's running node (that run id and
epoch only) and grabs at once, without waiting for the holder's session to expire.

Here: the holder's term (acquire, re-confirm, release) and the kazoo callbacks. Beside it:
when a standby may grab and both waivers of the switch delay (:mod:`cdc_platform.ha.zk_takeover`),
the kazoo client and its bounds (:mod:`cdc_platform.ha.zk_session`), the node reads and writes
that need no term (:mod:`cdc_platform.ha.zk_nodes`).

Connection states: SUSPENDED stops writes at once (:meth:`Lease.is_held` is False)
but is not a loss, because the session may well survive a server outage; LOST (session
expired) is. After a reconnect the holder re-confirms its node before writing again, and a
holder that was paused (SIGSTOP) distrusts the lease after ``session_timeout - margin`` of its
own monotonic clock until it re-confirmed it. kazoo re-registers the data watch on the new
connection, which re-reads the node.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Callable
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadVersionError,
    NodeExistsError,
    NoNodeError,
)
from kazoo.protocol.states import KazooState
from kazoo.recipe.watchers import DataWatch

from cdc_platform.config.leases import ZooKeeperLeaseConfig
from cdc_platform.errors import ConfigError, LeaseBackendError
from cdc_platform.ha.lease import Lease
from cdc_platform.ha.members import HolderInfo, MemberInfo
from cdc_platform.ha.running_node import UNKNOWN_HOLDER, RunningData, SwitchRules
from cdc_platform.ha.zk_nodes import (
    delete_own,
    ensure_paths,
    join_cluster,
    leave_cluster,
    list_members,
    mark_released,
    parse_epoch,
    read_holder,
)
from cdc_platform.ha.zk_session import ZooKeeperSession
from cdc_platform.ha.zk_takeover import TakeoverWatch
from cdc_platform.infra.clock import SYSTEM_CLOCK, Clock

__all__ = ["ZooKeeperLease"]

log = logging.getLogger("cdc_platform.ha")


class ZooKeeperLease(Lease):
    """A destination's lease as an ephemeral ZooKeeper node; see the module docstring."""

    backend = "zookeeper"
    deadline_is_final = False

    def __init__(  # noqa: PLR0913 (the settings and the destination; the rest keyword-only: an override and the injected clock and client)
        self,
        settings: ZooKeeperLeaseConfig,
        destination: str,
        *,
        address: str | None = None,
        connect_timeout: float | None = None,
        clock: Clock = SYSTEM_CLOCK,
        client_factory: Callable[..., Any] = KazooClient,
    ) -> None:
        session_timeout = settings.session_timeout_seconds
        switch_delay = settings.switch_delay_seconds
        super().__init__(
            destination,
            address=address or settings.address,
            clock=clock,
            renew_interval=min(1.0, session_timeout / 3),
            poll_interval=1.0,
        )
        if "/" in self.address:
            raise ConfigError(f"lease address {self.address!r} must not contain '/'")
        self.root = settings.root.rstrip("/") or ""
        base = f"{self.root}/destinations/{destination}"
        self.running_path = f"{base}/running"
        self.epoch_path = f"{base}/epoch"
        self.cluster_path = f"{base}/cluster"
        self.member_path = f"{self.cluster_path}/{self.address}"
        self.session_timeout = session_timeout
        self.switch_delay = switch_delay
        self.margin = min(1.0, session_timeout / 4)
        release_cooldown = settings.release_cooldown_seconds
        self.release_cooldown = (
            release_cooldown if release_cooldown is not None else 2 * switch_delay + 1.0
        )
        self._session = ZooKeeperSession(
            settings,
            destination,
            connect_timeout=connect_timeout,
            client_factory=client_factory,
        )
        self._watch: Any = None
        self._suspended = False
        self._member = False
        self._member_warned = False
        self._release_requested = False
        self.liveness = settings.liveness
        rules = SwitchRules(
            self.run_id,
            switch_delay=switch_delay,
            release_cooldown=self.release_cooldown,
            clock=clock,
        )
        self._takeover = TakeoverWatch(
            self._lock,
            rules,
            self._session,
            self.running_path,
            self.cluster_path,
            probe_timeout=self.liveness.connect_timeout_seconds,
            notify=self._notify,
        )

    # -- connection ------------------------------------------------------------------------------

    def _connect(self) -> Any:
        client, fresh = self._session.connect(self._on_state, self._ensure_paths)
        if fresh:
            # Outside the connect lock: the first callback runs in this thread and takes _lock.
            self._watch = DataWatch(client, self.running_path, self._on_running)
        return client

    def _ensure_paths(self, client: Any) -> None:
        ensure_paths(client, self.cluster_path, self.epoch_path, self.destination)

    # -- kazoo callbacks (kazoo threads: no blocking calls here) ---------------------------------

    def _on_state(self, state: str) -> None:
        if state == KazooState.SUSPENDED:
            with self._lock:
                self._suspended = True
                held = self._term is not None
            if held:
                log.warning(
                    "%s: ZooKeeper connection suspended: writes stop until it is confirmed again",
                    self.destination,
                )
            self._notify()
        elif state == KazooState.CONNECTED:
            with self._lock:
                self._suspended = False
            log.info("%s: ZooKeeper connected", self.destination)
            self._notify()
        else:  # LOST: the session expired; its ephemeral nodes are gone
            with self._lock:
                self._suspended = False
                self._member = False
            self._lose("the ZooKeeper session expired")
            self._notify()

    def _on_running(self, data: bytes | None, stat: Any, event: Any = None) -> None:
        parsed = None if stat is None else (RunningData.parse(data) or UNKNOWN_HOLDER)
        reason: str | None = None
        with self._lock:
            waived = self._takeover.observe(parsed)
            term = self._term
            if term is not None:
                if parsed is None:
                    reason = "the running node was deleted"
                elif parsed.run_id != self.run_id or parsed.epoch != term.epoch:
                    reason = f"taken over by {parsed.address} at epoch {parsed.epoch}"
                elif not parsed.active:
                    self._release_requested = True
            epoch = term.epoch if term is not None else None
        self._takeover.seen(parsed, stat, self._session.client)
        if waived:
            self._takeover.log_waived()
        if reason is not None:
            self._lose(reason, epoch)
        self._notify()

    # -- Lease -----------------------------------------------------------------------------------

    def _is_suspended(self) -> bool:
        """Read under the lock: kazoo's thread changes it at any time."""
        with self._lock:
            return self._suspended

    def _usable(self) -> bool:
        return not self._suspended and self._session.connected()

    def _grab_hint(self) -> float | None:
        with self._lock:
            return self._takeover.rules.grab_at

    def try_acquire(self, *, min_epoch: int = 0) -> int | None:  # noqa: PLR0911 (one return per outcome of the ZooKeeper transaction)
        """Create the running node if it is absent and the switch rules allow it."""
        with self._lock:
            if self._term is not None:
                return self._term.epoch
        client = self._connect()
        self._takeover.participating = True
        if self._is_suspended():
            return None
        if not self._member:
            self._join(client)
        for _ in range(5):
            if self._is_suspended():
                return None
            if not self._running_absent(client):
                return None
            with self._lock:
                allowed = self._takeover.rules.may_grab()
            if not allowed:
                return None
            try:
                raw_epoch, epoch_stat = self._session.op("read", client.get_async, self.epoch_path)
            except NoNodeError:
                self._ensure_paths(client)
                continue
            epoch = max(parse_epoch(raw_epoch) + 1, min_epoch, 0)
            payload = RunningData(
                self.address,
                self.run_id,
                True,
                epoch,
                self.clock.time(),
                self.liveness_address(),
            )
            t0 = self.clock.monotonic()
            tx = client.transaction()
            tx.set_data(self.epoch_path, str(epoch).encode(), version=epoch_stat.version)
            tx.create(self.running_path, payload.to_bytes(), ephemeral=True)
            results = self._session.op("transaction", tx.commit_async)
            if not any(isinstance(r, Exception) for r in results):
                self._begin_term(epoch, t0 + self.session_timeout - self.margin)
                with self._lock:
                    self._takeover.observe(payload)
                return epoch
            if isinstance(results[1], NodeExistsError):
                return None  # lost the race; the data watch reports the winner
            if isinstance(results[0], BadVersionError):
                continue  # someone else bumped the epoch: read it again
            raise LeaseBackendError(f"{self.destination}: acquisition failed: {results}")
        return None

    def _running_absent(self, client: Any) -> bool:
        """Read the running node into the switch rules: True when it is absent."""
        try:
            raw, stat = self._session.op("read", client.get_async, self.running_path)
        except NoNodeError:
            with self._lock:
                waived = self._takeover.observe(None)
            if waived:
                self._takeover.log_waived()
            return True
        data = RunningData.parse(raw)
        if data is not None and data.run_id == self.run_id:
            # Ours, yet we hold no term: a release that could not reach ZooKeeper left it
            # behind, and our live session would keep it forever. The data watch reports the
            # deletion and the next attempt takes the lease at once.
            delete_own(self._session.op, client, self.running_path, self.run_id, None)
            return False
        with self._lock:
            self._takeover.observe(data or UNKNOWN_HOLDER)
        self._takeover.seen(data, stat, client)
        return False

    def renew(self) -> bool:  # noqa: PLR0911 (one return per outcome of the ZooKeeper transaction)
        """Re-confirm the running node is ours (no write; ZooKeeper keeps it with the session)."""
        with self._lock:
            term = self._term
            if term is None:
                return False
            epoch = term.epoch
            self._release_requested = False
        client = self._session.client
        if client is None or not self._usable():
            return False
        t0 = self.clock.monotonic()
        try:
            raw, stat = self._session.op("read", client.get_async, self.running_path)
        except NoNodeError:
            self._lose("the running node is gone (session expired or node deleted)", epoch)
            return False
        except LeaseBackendError:
            return False
        data = RunningData.parse(raw)
        if data is None or data.run_id != self.run_id or data.epoch != epoch:
            holder = f"{data.address} at epoch {data.epoch}" if data else "an unknown holder"
            self._lose(f"taken over by {holder}", epoch)
            return False
        if stat.ephemeralOwner != self._session.session_id():
            self._lose("the running node belongs to an older session", epoch)
            return False
        if not data.active:
            self._release_for_operator(client, epoch, stat.version)
            return False
        return self._extend(epoch, t0 + self.session_timeout - self.margin)

    def _release_for_operator(self, client: Any, epoch: int, version: int) -> None:
        with self._lock:
            # Before the delete: its watch event may race.
            self._takeover.rules.released_by_operator()
        with contextlib.suppress(NoNodeError, BadVersionError):  # gone or changed: stop anyway
            self._session.op("delete", client.delete_async, self.running_path, version=version)
        self._lose("released by an operator (manual switch-over)", epoch)

    def release(self) -> None:
        """Stop the term now; delete our running node if ZooKeeper answers in time.

        Never blocks longer than two operation timeouts, and not at all while the connection
        is down (a request would only queue): the term ends locally at once, and a node left
        behind goes with the session (closed by :meth:`close`, or expired by the server), or
        is removed by this process's next acquisition.
        """
        with self._lock:
            epoch = self._end_term()
            usable = self._usable()
        if epoch is None:
            return
        client = self._session.client
        if client is None:
            return
        if not usable:
            log.warning(
                "%s: could not delete the running node (epoch %d): ZooKeeper is unreachable; "
                "it goes when the session ends",
                self.destination,
                epoch,
            )
            return
        try:
            delete_own(self._session.op, client, self.running_path, self.run_id, epoch)
        except LeaseBackendError as exc:
            log.warning(
                "%s: could not delete the running node (epoch %d): %s; it goes when the "
                "session ends",
                self.destination,
                epoch,
                exc,
            )
            return
        log.info("%s: lease released by %s (epoch %d)", self.destination, self.address, epoch)

    def _join(self, client: Any) -> None:
        """Create this process's ephemeral member node under the persistent cluster node."""
        member = json.dumps({"run_id": self.run_id, "since": self.clock.time()}).encode()
        try:
            joined = join_cluster(
                self._session.op, client, self.member_path, member, self._session.session_id()
            )
        except NoNodeError:
            self._ensure_paths(client)
            return
        self._member = joined is True
        if joined is False and not self._member_warned:
            self._member_warned = True
            log.warning(
                "%s: member node %s belongs to another session (an earlier process with "
                "the same address, until its session expires)",
                self.destination,
                self.member_path,
            )

    def _tick_extra(self) -> None:
        client = self._session.client
        if client is None or not self._usable():
            return
        if self._release_requested:
            self.renew()  # sees active=false and releases
        if self._takeover.participating and not self._member:
            self._join(client)

    def holder(self) -> HolderInfo | None:
        """The running node's content, or None when absent."""
        return read_holder(self._session.op, self._connect(), self.running_path, self.destination)

    def last_epoch(self) -> int | None:
        """The newest epoch handed out (held or not), or None before the first."""
        client = self._connect()
        try:
            raw, _stat = self._session.op("read", client.get_async, self.epoch_path)
        except NoNodeError:
            return None
        value = parse_epoch(raw)
        return value if value >= 0 else None

    def request_release(self) -> HolderInfo | None:
        """Set ``active: false`` in the running node; its holder deletes it and steps aside."""
        return mark_released(self._session.op, self._connect(), self.running_path, self.destination)

    def members(self) -> list[MemberInfo]:
        """The member nodes under ``cluster``."""
        return list_members(self._session.op, self._connect(), self.cluster_path)

    def _close_backend(self) -> None:
        """Stop probing; drop the member node and the session, each within a bound (see
        ``stop_client``)."""
        self._takeover.stop()
        with self._lock:
            usable = self._usable()
            client = self._session.detach()
            self._takeover.participating = False
        if client is None:
            return
        if self._member:
            self._member = False
            problem = leave_cluster(self._session.op, client, self.member_path, usable=usable)
            if problem is not None:
                log.warning(
                    "%s: could not delete the member node %s (%s); it goes when the session ends",
                    self.destination,
                    self.member_path,
                    problem,
                )
        self._session.stop(client)
