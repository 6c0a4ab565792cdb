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

Connection states: SUSPENDED stops writes at once (:meth:`Lease.is_held` is False)
but is not a loss, because the session may well survive a server outage; LOST (session
expired) is. After a reconnect the holder re-confirms its node before writing again, and a
holder that was paused (SIGSTOP) distrusts the lease after ``session_timeout - margin`` of its
own monotonic clock until it re-confirmed it. Reconnects use a bounded back-off (0.1 s
doubling to 1 s, forever) and kazoo re-registers the data watch, which re-reads the node.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from collections.abc import Callable
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadVersionError,
    KazooException,
    NodeExistsError,
    NoNodeError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import KazooState
from kazoo.recipe.watchers import DataWatch
from pydantic import SecretStr

from cdc_platform.config.zookeeper_tls import ZooKeeperTlsConfig
from cdc_platform.errors import ConfigError, LeaseBackendError
from cdc_platform.ha.holder_session import HolderSessionWatch
from cdc_platform.ha.lease import Lease
from cdc_platform.ha.liveness import LivenessOptions, ProbeFollower
from cdc_platform.ha.members import HolderInfo, MemberInfo
from cdc_platform.ha.running_node import UNKNOWN_HOLDER, RunningData, SwitchRules
from cdc_platform.ha.zk_nodes import (
    delete_dead_holder,
    join_cluster,
    list_members,
    mark_released,
    read_holder,
)
from cdc_platform.infra.clock import SYSTEM_CLOCK, Clock
from cdc_platform.infra.zookeeper import (
    CONNECTION_RETRY,
    client_handler,
    digest_acl_options,
    stop_client,
)
from cdc_platform.infra.zookeeper_tls import refusal_message, security_warnings, tls_options

__all__ = ["ZooKeeperLease"]

log = logging.getLogger("cdc_platform.ha")


class ZooKeeperLease(Lease):
    """A destination's lease as an ephemeral ZooKeeper node; see the module docstring."""

    backend = "zookeeper"
    deadline_is_final = False

    def __init__(  # noqa: PLR0913 (hosts and destination; the rest are keyword-only settings with defaults)
        self,
        hosts: str,
        destination: str,
        *,
        root: str = "/cdc",
        address: str | None = None,
        run_id: str | None = None,
        session_timeout: float = 10.0,
        switch_delay: float = 5.0,
        release_cooldown: float | None = None,
        auth: SecretStr | None = None,
        tls: ZooKeeperTlsConfig | None = None,
        connect_timeout: float | None = None,
        safety_margin: float | None = None,
        liveness: LivenessOptions | None = None,
        clock: Clock = SYSTEM_CLOCK,
        client_factory: Callable[..., Any] = KazooClient,
    ) -> None:
        super().__init__(
            destination,
            address=address,
            run_id=run_id,
            clock=clock,
            renew_interval=min(1.0, session_timeout / 3),
            poll_interval=1.0,
        )
        if "/" in self.address:
            raise ConfigError(f"lease address {self.address!r} must not contain '/'")
        self.hosts = hosts
        self.root = root.rstrip("/") or ""
        base = f"{self.root}/destinations/{destination}"
        self.running_path = f"{base}/running"
        self.epoch_path = f"{base}/epoch"
        self.cluster_path = f"{base}/cluster"
        self.member_path = f"{self.cluster_path}/{self.address}"
        self.session_timeout = session_timeout
        self.switch_delay = switch_delay
        self.margin = safety_margin if safety_margin is not None else min(1.0, session_timeout / 4)
        self.release_cooldown = (
            release_cooldown if release_cooldown is not None else 2 * switch_delay + 1.0
        )
        self.connect_timeout = connect_timeout if connect_timeout is not None else session_timeout
        self._op_timeout = max(2.0, session_timeout)
        self._auth = auth
        self._tls = tls
        self._tls_options = tls_options(tls)  # a bad file: ConfigError now, not retried later
        for warning in security_warnings(hosts, auth, tls):
            log.warning("%s: %s", destination, warning)
        self._client_factory = client_factory
        self._client: Any = None
        self._connect_lock = threading.Lock()
        self._watch: Any = None
        self._suspended = False
        self._participating = False
        self._member = False
        self._member_warned = False
        self._release_requested = False
        self._holder_session = HolderSessionWatch(
            self.cluster_path, self.run_id, self._on_holder_gone
        )
        self.liveness = liveness or LivenessOptions()
        self._dead_run_id: str | None = None
        """The run id of a holder a liveness probe proved dead (its node may be deleted)."""
        self._probes = ProbeFollower(
            self.run_id, self._on_holder_dead, timeout=self.liveness.connect_timeout
        )
        self._rules = SwitchRules(
            self.run_id,
            switch_delay=switch_delay,
            release_cooldown=self.release_cooldown,
            clock=clock,
        )

    # -- connection ------------------------------------------------------------------------------

    def _connect(self) -> Any:
        # Not under self._lock: kazoo calls our state listener from its own thread during
        # start(), and that listener takes self._lock.
        with self._connect_lock:
            if self._client is not None:
                return self._client
            handler = client_handler(self.session_timeout)
            client = self._client_factory(
                hosts=self.hosts,
                timeout=self.session_timeout,
                connection_retry=dict(CONNECTION_RETRY),
                command_retry={"max_tries": 2, "delay": 0.1, "backoff": 2, "max_delay": 1.0},
                handler=handler,
                **digest_acl_options(self._auth),
                **self._tls_options,
            )
            client.add_listener(self._on_state)
            try:
                client.start(timeout=self.connect_timeout)
            except (KazooTimeoutError, KazooException, OSError) as exc:
                stop_client(client, timeout=self.session_timeout)
                cause = refusal_message(handler.tls_refusal, self._tls)
                raise LeaseBackendError(
                    f"{self.destination}: cannot connect to ZooKeeper at {self.hosts}: "
                    f"{cause or f'{type(exc).__name__}: {exc}'}"
                ) from exc
            try:
                self._ensure_paths(client)
            except LeaseBackendError:
                stop_client(client, timeout=self.session_timeout)
                raise
            self._client = client
        # Outside the connect lock: the first callback runs in this thread and takes _lock.
        self._watch = DataWatch(client, self.running_path, self._on_running)
        return client

    def _op(self, what: str, start: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run one async kazoo call with a timeout; library errors become LeaseBackendError.

        NoNode/NodeExists/BadVersion pass through: they are answers, not failures.
        """
        try:
            return start(*args, **kwargs).get(timeout=self._op_timeout)
        except (NoNodeError, NodeExistsError, BadVersionError):
            raise
        except (KazooTimeoutError, KazooException, OSError) as exc:
            raise LeaseBackendError(
                f"{self.destination}: ZooKeeper {what} failed: {type(exc).__name__}: {exc}"
            ) from exc

    def _ensure_paths(self, client: Any) -> None:
        try:
            client.ensure_path(self.cluster_path)
            with contextlib.suppress(NodeExistsError):
                client.create(self.epoch_path, b"-1")
        except (KazooTimeoutError, KazooException, OSError) as exc:
            raise LeaseBackendError(
                f"{self.destination}: creating {self.cluster_path} failed: "
                f"{type(exc).__name__}: {exc}"
            ) from exc

    def _session_id(self) -> int | None:
        client = self._client
        if client is None or client.client_id is None:
            return None
        return int(client.client_id[0])

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
            self._rules.observe(parsed)
            waived = parsed is None and self._waive_if_holder_gone()
            term = self._term
            if term is not None:
                if parsed is None:
                    reason = "the running node was deleted"
                elif parsed.run_id != self.run_id or parsed.epoch != term.epoch:
                    reason = f"taken over by {parsed.address} at epoch {parsed.epoch}"
                elif not parsed.active:
                    self._release_requested = True
            epoch = term.epoch if term is not None else None
        self._holder_session.note(parsed, stat, self._client)
        self._follow(parsed)
        if waived:
            self._log_waived()
        if reason is not None:
            self._lose(reason, epoch)
        self._notify()

    def _on_holder_gone(self) -> None:
        """The last holder's member node went (a kazoo thread): waive a pending delay."""
        with self._lock:
            waived = self._waive_if_holder_gone()
        if waived:
            self._log_waived()
            self._notify()

    def _waive_if_holder_gone(self) -> bool:
        """Under the lock: skip a pending switch delay if the holder's member node went, or a
        liveness probe proved its process gone."""
        holder = self._rules.holder
        dead = holder is not None and holder.run_id == self._dead_run_id
        if not (dead or self._holder_session.gone()) or not self._rules.waiting_for_switch_delay():
            return False
        self._rules.holder_session_ended()
        return True

    def _log_waived(self) -> None:
        log.info(
            "%s: the running node's holder is gone: taking over without the switch delay",
            self.destination,
        )

    # -- liveness (a standby's direct death signal; see cdc_platform.ha.liveness) -------------

    def _follow(self, data: RunningData | None) -> None:
        """Probe the other holder's liveness listener; only a standby (observers never act)."""
        if data is None or not self._participating:
            self._probes.follow(None, -1, None)
        else:
            self._probes.follow(data.run_id, data.epoch, data.liveness)

    def _on_holder_dead(self, run_id: str, epoch: int) -> None:
        """A probe proved the holder's process gone (a probe thread): delete its running node,
        if it is still that holder's (version-checked), and take over without the delay."""
        client = self._client
        if client is None:
            return
        with self._lock:
            self._dead_run_id = run_id
        try:
            deleted = delete_dead_holder(self._op, client, self.running_path, run_id, epoch)
            if deleted is not None:
                log.warning(
                    "%s: the process of the holder %s (epoch %d) is gone (its liveness "
                    "listener closed): deleted its running node",
                    self.destination,
                    deleted.address,
                    epoch,
                )
        except LeaseBackendError as exc:
            log.warning(
                "%s: could not delete the running node of a dead holder (%s): waiting for "
                "its session to expire",
                self.destination,
                exc,
            )
        self._on_holder_gone()

    # -- Lease -----------------------------------------------------------------------------------

    def _is_suspended(self) -> bool:
        """Read under the lock: kazoo's thread changes it at any time."""
        with self._lock:
            return self._suspended

    def _usable(self) -> bool:
        client = self._client
        return not self._suspended and client is not None and client.state == KazooState.CONNECTED

    def _grab_hint(self) -> float | None:
        with self._lock:
            return self._rules.grab_at

    def try_acquire(self, *, min_epoch: int = 0) -> int | None:  # noqa: PLR0911 (one return per outcome of the ZooKeeper transaction)
        """Create the running node if it is absent and the switch rules allow it."""
        with self._lock:
            if self._term is not None:
                return self._term.epoch
        client = self._connect()
        self._participating = True
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
                allowed = self._rules.may_grab()
            if not allowed:
                return None
            try:
                raw_epoch, epoch_stat = self._op("read", client.get_async, self.epoch_path)
            except NoNodeError:
                self._ensure_paths(client)
                continue
            try:
                last = int(raw_epoch or b"-1")
            except ValueError:
                last = -1
            epoch = max(last + 1, min_epoch, 0)
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
            results = self._op("transaction", tx.commit_async)
            if not any(isinstance(r, Exception) for r in results):
                self._begin_term(epoch, t0 + self.session_timeout - self.margin)
                with self._lock:
                    self._rules.observe(payload)
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
            raw, stat = self._op("read", client.get_async, self.running_path)
        except NoNodeError:
            with self._lock:
                self._rules.observe(None)
                waived = self._waive_if_holder_gone()
            if waived:
                self._log_waived()
            return True
        data = RunningData.parse(raw)
        if data is not None and data.run_id == self.run_id:
            # Ours, yet we hold no term: a release that could not reach ZooKeeper left it
            # behind, and our live session would keep it forever. The data watch reports the
            # deletion and the next attempt takes the lease at once.
            self._delete_if_ours(client, None)
            return False
        with self._lock:
            self._rules.observe(data or UNKNOWN_HOLDER)
        self._holder_session.note(data, stat, client)
        self._follow(data)
        return False

    def renew(self) -> bool:  # noqa: PLR0911 (one return per outcome of the ZooKeeper transaction)
        """Re-confirm the running node is ours (no write; ZooKeeper keeps it with the session)."""
        with self._lock:
            term = self._term
            if term is None:
                return False
            epoch = term.epoch
            self._release_requested = False
        client = self._client
        if client is None or not self._usable():
            return False
        t0 = self.clock.monotonic()
        try:
            raw, stat = self._op("read", client.get_async, self.running_path)
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
        if stat.ephemeralOwner != self._session_id():
            self._lose("the running node belongs to an older session", epoch)
            return False
        if not data.active:
            self._release_for_operator(client, epoch, stat.version)
            return False
        return self._extend(epoch, t0 + self.session_timeout - self.margin)

    def _release_for_operator(self, client: Any, epoch: int, version: int) -> None:
        with self._lock:
            self._rules.released_by_operator()  # before the delete: its watch event may race
        with contextlib.suppress(NoNodeError, BadVersionError):  # gone or changed: stop anyway
            self._op("delete", client.delete_async, self.running_path, version=version)
        self._lose("released by an operator (manual switch-over)", epoch)

    def release(self) -> None:
        """Stop the term now; delete our running node if ZooKeeper answers in time.

        Never blocks longer than two operation timeouts, and not at all while the connection
        is down (a request would only queue): the term ends locally at once, and a node left
        behind goes with the session (closed by :meth:`close`, or expired by the server), or
        is removed by this process's next acquisition.
        """
        with self._lock:
            term = self._term
            if term is None:
                return
            epoch = term.epoch
            self._end_term()
            usable = self._usable()
        client = self._client
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
            self._delete_if_ours(client, epoch)
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

    def _delete_if_ours(self, client: Any, epoch: int | None) -> None:
        """Delete the running node if this lease object wrote it (of ``epoch``, if given)."""
        try:
            raw, stat = self._op("read", client.get_async, self.running_path)
            data = RunningData.parse(raw)
            if (
                data is not None
                and data.run_id == self.run_id
                and (epoch is None or data.epoch == epoch)
            ):
                self._op("delete", client.delete_async, self.running_path, version=stat.version)
        except (NoNodeError, BadVersionError):
            pass

    def _join(self, client: Any) -> None:
        """Create this process's ephemeral member node under the persistent cluster node."""
        member = json.dumps({"run_id": self.run_id, "since": self.clock.time()}).encode()
        try:
            joined = join_cluster(self._op, client, self.member_path, member, self._session_id())
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
        client = self._client
        if client is None or not self._usable():
            return
        if self._release_requested:
            self.renew()  # sees active=false and releases
        if self._participating and not self._member:
            self._join(client)

    def holder(self) -> HolderInfo | None:
        """The running node's content, or None when absent."""
        return read_holder(self._op, self._connect(), self.running_path, self.destination)

    def last_epoch(self) -> int | None:
        """The newest epoch handed out (held or not), or None before the first."""
        client = self._connect()
        try:
            raw, _stat = self._op("read", client.get_async, self.epoch_path)
        except NoNodeError:
            return None
        try:
            value = int(raw or b"-1")
        except ValueError:
            return None
        return value if value >= 0 else None

    def request_release(self) -> HolderInfo | None:
        """Set ``active: false`` in the running node; its holder deletes it and steps aside."""
        data = mark_released(self._op, self._connect(), self.running_path)
        if data is None:
            return None
        return HolderInfo(
            destination=self.destination,
            address=data.address,
            run_id=data.run_id,
            epoch=data.epoch,
            active=False,
            since=data.since,
            backend=self.backend,
        )

    def members(self) -> list[MemberInfo]:
        """The member nodes under ``cluster``."""
        return list_members(self._op, self._connect(), self.cluster_path)

    def _close_backend(self) -> None:
        """Stop probing; drop the member node and the session, each within a bound (see
        ``stop_client``)."""
        self._probes.stop()
        with self._lock:
            usable = self._usable()
            client, self._client = self._client, None
            self._participating = False
        if client is None:
            return
        if self._member:
            self._member = False
            problem: str | None = "ZooKeeper is unreachable"
            if usable:
                try:
                    self._op("delete", client.delete_async, self.member_path)
                    problem = None
                except NoNodeError:
                    problem = None
                except (LeaseBackendError, BadVersionError) as exc:
                    problem = str(exc)
            if problem is not None:
                log.warning(
                    "%s: could not delete the member node %s (%s); it goes when the session ends",
                    self.destination,
                    self.member_path,
                    problem,
                )
        stop_client(client, timeout=self.session_timeout, what=f"{self.destination}: lease")
