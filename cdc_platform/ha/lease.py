"""The HA lease: which process may run (and write) a destination; the epoch that fences the rest.

One interface, two backends (ZooKeeper running node, database lease row). The rules every
backend keeps:

* **Wait to acquire** (hot standby): :meth:`Lease.acquire` blocks until this process holds the
  lease, a timeout passes or a stop event is set.
* **Epoch** (fencing token): every acquisition gets an epoch larger than any earlier one of the
  same destination, including the holder's own earlier terms. Every Delta commit carries it and
  the sink refuses commits from an epoch older than the table's newest (see ``docs/ha.md``).
  ``min_epoch`` raises the floor, so a lease store that is behind the change log (a new
  ZooKeeper, a switched backend) never hands out an epoch the table would refuse forever.
* **Local validity**: a holder only trusts the lease until ``t0 + ttl - margin`` of its own
  monotonic clock, where ``t0`` is taken *before* the renewal request was sent. Whatever the
  store's clock says, nobody else can take over earlier than ``ttl`` after that request reached
  the store, so the holder stops first (clock *rate* drift is covered by the margin, a clock
  *step* on the store by the epoch fence).
* **Loss** is reported once per term to every ``on_lost`` callback, from a lease thread, and
  :meth:`Lease.is_held` turns False at once; callbacks must be quick (request a stop, set an
  event).

Backends implement :meth:`Lease.try_acquire`, :meth:`Lease.renew`, :meth:`Lease.release`,
:meth:`Lease.holder`, :meth:`Lease.request_release` and :meth:`Lease.members`; the waiting,
term bookkeeping, callbacks and the maintenance thread live here; what they report (the holder,
the members) is in :mod:`cdc_platform.ha.members`.
"""

from __future__ import annotations

import logging
import threading
from abc import abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from cdc_platform.config.leases import LivenessConfig
from cdc_platform.errors import CdcError, LeaseError, LeaseLostError
from cdc_platform.ha.liveness import LivenessListener, open_listener
from cdc_platform.ha.members import HolderInfo, MemberInfo, default_address, new_run_id
from cdc_platform.infra.clock import SYSTEM_CLOCK, Clock
from cdc_platform.infra.closing import Closing

__all__ = ["Lease", "LostCallback"]

log = logging.getLogger("cdc_platform.ha")

LostCallback = Callable[[LeaseLostError], None]


@dataclass
class _Term:
    epoch: int
    valid_until: float
    lost: LeaseLostError | None = None


class Lease(Closing):
    """A destination's HA lease held by this process; see the module docstring for the rules.

    Thread-safe. :meth:`start` runs the maintenance thread (renewal, loss detection);
    :meth:`close` releases and stops it. A lease object serves many terms: after a loss the
    owner calls :meth:`acquire` again.
    """

    backend: ClassVar[str] = "abstract"
    deadline_is_final: ClassVar[bool] = True
    """True: passing the local validity deadline ends the term (database). False: it only
    pauses writing until the store confirms the term again (ZooKeeper, whose session may
    survive an outage)."""

    def __init__(  # noqa: PLR0913 (the destination; the rest are keyword-only settings with defaults)
        self,
        destination: str,
        *,
        address: str | None = None,
        run_id: str | None = None,
        clock: Clock = SYSTEM_CLOCK,
        renew_interval: float = 1.0,
        poll_interval: float = 1.0,
    ) -> None:
        self.destination = destination
        self.address = address or default_address()
        self.run_id = run_id or new_run_id()
        self.clock = clock
        self.renew_interval = renew_interval
        self.poll_interval = poll_interval
        self._lock = threading.RLock()
        self._term: _Term | None = None
        self._callbacks: list[LostCallback] = []
        self._changed = threading.Condition(self._lock)
        self._wake = threading.Event()
        """Wakes the maintenance thread (re-confirm now)."""
        self._store_event = threading.Event()
        """Wakes an acquire() waiting for a chance (holder gone, delay over)."""
        self._next_renew = 0.0
        self._thread: threading.Thread | None = None
        self._closing = threading.Event()
        self._last_error_log = -1e9
        self.liveness = LivenessConfig(enabled=False)
        """The liveness listener's settings (backends that publish one turn it on)."""
        self._listener: LivenessListener | None = None
        self._listener_tried = False

    # -- backend hooks -------------------------------------------------------------------------

    @abstractmethod
    def try_acquire(self, *, min_epoch: int = 0) -> int | None:
        """One attempt: the new epoch if this process now holds the lease, else None.

        Honours the backend's anti-flap rules (a switch delay, a cool-down after a manual
        release). Raises LeaseBackendError when the store cannot be reached.
        """

    @abstractmethod
    def renew(self) -> bool:
        """Extend (database) or re-confirm (ZooKeeper) the current term.

        True when the term is confirmed; False when it could not be confirmed right now (the
        deadline decides) or is gone (then the term is ended and ``on_lost`` called).
        """

    @abstractmethod
    def release(self) -> None:
        """Give the lease up now, if held (another process may take it at once)."""

    @abstractmethod
    def holder(self) -> HolderInfo | None:
        """The current holder as the store says, or None when nobody holds the lease."""

    @abstractmethod
    def request_release(self) -> HolderInfo | None:
        """Operator switch-over: ask the current holder (any process) to release.

        Returns the holder that was asked, or None when nobody holds the lease. The holder
        releases within one renewal interval and then stays away for a cool-down, so a
        standby takes over.
        """

    @abstractmethod
    def members(self) -> list[MemberInfo]:
        """Processes that take part in this destination (active and standby)."""

    def liveness_address(self) -> str | None:
        """``host:port`` of this process's liveness listener, opened on first use; None when
        disabled or it could not listen (:mod:`cdc_platform.ha.liveness`)."""
        with self._lock:
            if not self._listener_tried:
                self._listener_tried = True
                self._listener = open_listener(self.run_id, self.liveness, self.destination)
            return self._listener.address if self._listener is not None else None

    @property
    def listener(self) -> LivenessListener | None:
        """This process's liveness listener once :meth:`liveness_address` opened it, else None:
        how many standbys probe it (``connections``); closing it plays a dead holder."""
        with self._lock:
            return self._listener

    def _grab_hint(self) -> float | None:
        """Monotonic time at which an attempt is expected to succeed (a switch delay or a
        cool-down ends, the holder is gone), or None: no reason to try before the next poll."""
        return None

    def _tick_extra(self) -> None:
        """Backend work for each maintenance step (membership, operator requests)."""

    def _close_backend(self) -> None:
        """Drop connections."""

    # -- term bookkeeping (backends call these) ------------------------------------------------

    def _begin_term(self, epoch: int, valid_until: float) -> None:
        with self._lock:
            self._term = _Term(epoch, valid_until)
            self._next_renew = self.clock.monotonic() + self.renew_interval
            self._changed.notify_all()
        log.info("%s: lease acquired by %s, epoch %d", self.destination, self.address, epoch)

    def _extend(self, epoch: int, valid_until: float) -> bool:
        """Move the validity deadline of term ``epoch``; False if that term is over."""
        with self._lock:
            term = self._term
            if term is None or term.epoch != epoch or term.lost is not None:
                return False
            term.valid_until = max(term.valid_until, valid_until)
            self._changed.notify_all()
            return True

    def _end_term(self) -> int | None:
        """End the term on purpose (release): no callbacks. The epoch it had; None (and
        nothing done) when there was no term."""
        with self._lock:
            term = self._term
            if term is None:
                return None
            self._term = None
            self._changed.notify_all()
            return term.epoch

    def _lose(self, reason: str, epoch: int | None = None) -> None:
        """End the current term (only if it is ``epoch``, when given) and tell the callbacks."""
        with self._lock:
            term = self._term
            if term is None or term.lost is not None:
                return
            if epoch is not None and term.epoch != epoch:
                return
            error = LeaseLostError(self.destination, term.epoch, reason)
            term.lost = error
            self._term = None
            callbacks = list(self._callbacks)
            self._changed.notify_all()
        log.warning("%s", error)
        for callback in callbacks:
            try:
                callback(error)
            except Exception:  # a callback must never break the lease thread
                log.exception("%s: on_lost callback failed", self.destination)

    # -- public API ----------------------------------------------------------------------------

    @property
    def epoch(self) -> int | None:
        """Epoch of the current term, or None when not held."""
        with self._lock:
            return self._term.epoch if self._term is not None else None

    def on_lost(self, callback: LostCallback) -> None:
        """Call ``callback`` (quickly, from a lease thread) whenever a term is lost."""
        with self._lock:
            self._callbacks.append(callback)

    def is_held(self) -> bool:
        """True while this process may write: term active and locally valid right now.

        No I/O: cheap enough to call before every commit.
        """
        with self._lock:
            term = self._term
            if term is None:
                return False
            if self.clock.monotonic() >= term.valid_until:
                return False
            return self._usable()

    def _usable(self) -> bool:
        """Backend condition on top of the deadline (ZooKeeper: not SUSPENDED)."""
        return True

    def wait_held(self, timeout: float) -> bool:
        """Wait up to ``timeout`` for the current term to be usable again.

        True when usable; False on timeout. Raises LeaseLostError when there is no term (or
        it was lost), so a writer blocked on a suspended ZooKeeper connection learns at once.
        """
        deadline = self.clock.monotonic() + timeout
        while True:
            with self._lock:
                term = self._term
                if term is None:
                    raise LeaseLostError(self.destination, None, "the lease is not held")
                now = self.clock.monotonic()
                if now >= term.valid_until and self.deadline_is_final:
                    epoch = term.epoch
                else:
                    epoch = None
                    if now < term.valid_until and self._usable():
                        return True
                    if now >= deadline:
                        return False
            if epoch is not None:
                self._lose("the lease was not renewed in time", epoch)
                raise LeaseLostError(self.destination, epoch, "the lease was not renewed in time")
            self._wake.set()  # let the maintenance thread re-confirm now
            with self._lock:
                self._changed.wait(min(0.05, max(0.0, deadline - self.clock.monotonic())))

    def acquire(
        self,
        timeout: float | None = None,
        *,
        min_epoch: int = 0,
        stop: threading.Event | None = None,
    ) -> int | None:
        """Wait until this process holds the lease (hot standby); return the new epoch.

        Returns None when ``timeout`` passed or ``stop`` was set first. Store errors are
        logged and retried: a standby outlives an outage of the lease store.
        """
        with self._lock:
            if self._term is not None:
                return self._term.epoch
        deadline = None if timeout is None else self.clock.monotonic() + timeout
        min_gap = min(0.05, self.poll_interval)
        last_attempt = -1e18
        while True:
            if stop is not None and stop.is_set():
                return None
            now = self.clock.monotonic()
            hint = self._grab_hint()
            due = now >= last_attempt + self.poll_interval or (
                hint is not None and now >= hint and now >= last_attempt + min_gap
            )
            if due:
                last_attempt = now
                try:
                    epoch = self.try_acquire(min_epoch=min_epoch)
                except LeaseError as exc:
                    self._log_error("acquiring", exc)
                    epoch = None
                if epoch is not None:
                    return epoch
                now = self.clock.monotonic()
                hint = self._grab_hint()
            wake_at = last_attempt + self.poll_interval
            if hint is not None:
                wake_at = min(wake_at, max(hint, last_attempt + min_gap))
            if deadline is not None:
                if now >= deadline:
                    return None
                wake_at = min(wake_at, deadline)
            self._sleep(max(wake_at - now, 0.001), stop)

    def _sleep(self, seconds: float, stop: threading.Event | None) -> None:
        """Sleep in short slices, waking early on store events and on ``stop``."""
        end = self.clock.monotonic() + seconds
        while True:
            left = end - self.clock.monotonic()
            if left <= 0 or (stop is not None and stop.is_set()):
                return
            if self.clock.sleep(min(left, 0.1), self._store_event):
                self._store_event.clear()
                return

    def _notify(self) -> None:
        """Something changed in the store: wake the maintenance thread and any acquire()."""
        self._wake.set()
        self._store_event.set()
        with self._lock:
            self._changed.notify_all()

    def _log_error(self, what: str, exc: CdcError) -> None:
        now = self.clock.monotonic()
        if now - self._last_error_log >= 10.0:
            self._last_error_log = now
            log.warning("%s: %s the lease failed (will retry): %s", self.destination, what, exc)

    # -- maintenance -----------------------------------------------------------------------------

    def tick(self) -> None:
        """One maintenance step: end an expired term, renew when due, backend chores.

        The maintenance thread calls this; tests with a fake clock call it directly.
        """
        with self._lock:
            term = self._term
            now = self.clock.monotonic()
            expired = term is not None and now >= term.valid_until and self.deadline_is_final
            due = term is not None and (now >= self._next_renew or self._wake.is_set())
        if expired and term is not None:
            self._lose(
                "not renewed within its validity (store unreachable or process paused)",
                term.epoch,
            )
        elif due:
            self._next_renew = now + self.renew_interval
            try:
                self.renew()
            except LeaseError as exc:
                self._log_error("renewing", exc)
        try:
            self._tick_extra()
        except LeaseError as exc:
            self._log_error("maintaining", exc)

    def start(self) -> None:
        """Start the maintenance thread (idempotent)."""
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return
            self._closing.clear()
            self._thread = threading.Thread(
                target=self._maintain, name=f"cdc-lease-{self.destination}", daemon=True
            )
            self._thread.start()

    def _maintain(self) -> None:
        step = max(0.01, min(self.renew_interval, 0.25))
        while not self._closing.is_set():
            try:
                self.tick()
            except Exception:  # the thread must survive anything; the deadline still rules
                log.exception("%s: lease maintenance failed", self.destination)
            if self.clock.sleep(step, self._wake):
                self._wake.clear()
                # A store event: handle it now, but do not spin on repeated wake-ups.
                self._next_renew = min(self._next_renew, self.clock.monotonic())

    def close(self) -> None:
        """Release (if held), stop the maintenance thread, drop connections."""
        try:
            self.release()
        except LeaseError as exc:
            log.warning("%s: release on close failed: %s", self.destination, exc)
        self._closing.set()
        self._wake.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=10)
        self._thread = None
        with self._lock:
            listener, self._listener = self._listener, None
        if listener is not None:
            listener.close()
        self._close_backend()

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(destination={self.destination!r}, address={self.address!r},"
            f" epoch={self.epoch})"
        )
