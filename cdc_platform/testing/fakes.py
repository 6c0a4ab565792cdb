"""Fakes of the engine's HA interfaces, kept next to the real ones so they stay in step.

* :class:`FakeClock`: a :class:`cdc_platform.ha.lease.Clock` whose time only moves when a
  test (or a "sleep") moves it, so expiry, renewal and delays are tested without sleeping.
* :class:`InMemoryLease`: a :class:`cdc_platform.ha.lease.Lease` on a shared in-memory store
  with the database backend's semantics (expiry on the store clock, strictly increasing epochs,
  operator release with a cool-down); for tests of code that uses a lease (the runtime
  supervisor, Dagster sensors) without a ZooKeeper or a database.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, replace

from cdc_platform.errors import LeaseBackendError
from cdc_platform.ha.lease import Lease
from cdc_platform.ha.members import HolderInfo, MemberInfo
from cdc_platform.infra.clock import SYSTEM_CLOCK, Clock

__all__ = ["FakeClock", "InMemoryLease", "InMemoryLeaseStore"]


class FakeClock:
    """Manually driven time: ``monotonic`` and ``time`` advance together, ``sleep`` advances.

    ``time`` starts at ``wall`` (any value: tests of clock skew set it far from the real
    time); :meth:`jump_wall` moves only the wall clock, like an NTP step.
    """

    def __init__(self, start: float = 1000.0, wall: float = 1_700_000_000.0) -> None:
        self._mono = start
        self._wall = wall
        self._lock = threading.Lock()
        self.slept = 0.0
        """Total seconds "slept", to check that waiting code waited as long as it should."""

    def monotonic(self) -> float:
        """The fake monotonic clock."""
        with self._lock:
            return self._mono

    def time(self) -> float:
        """The fake wall clock."""
        with self._lock:
            return self._wall

    def advance(self, seconds: float) -> None:
        """Move both clocks forward."""
        if seconds < 0:
            raise ValueError("time does not go backwards")
        with self._lock:
            self._mono += seconds
            self._wall += seconds

    def jump_wall(self, seconds: float) -> None:
        """Step only the wall clock (forwards or backwards), as NTP may."""
        with self._lock:
            self._wall += seconds

    def sleep(self, seconds: float, wake: threading.Event | None = None) -> bool:
        """Return at once if ``wake`` is set, else advance by ``seconds``."""
        if wake is not None and wake.is_set():
            return True
        if seconds > 0:
            self.advance(seconds)
            with self._lock:
                self.slept += seconds
        return wake is not None and wake.is_set()


@dataclass(frozen=True)
class _Record:
    address: str
    run_id: str
    epoch: int
    expires_at: float
    active: bool
    since: float


class InMemoryLeaseStore:
    """What a lease database would hold, shared by the :class:`InMemoryLease` objects of a test.

    Times are on ``clock`` (the "store clock"); each lease may use another clock for its own
    validity, to test skew.
    """

    def __init__(self, clock: Clock = SYSTEM_CLOCK) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self._records: dict[str, _Record] = {}
        self._members: dict[str, dict[str, MemberInfo]] = {}
        self.available = True
        """Set False to make every call fail like an unreachable store."""

    def _check(self) -> None:
        if not self.available:
            raise LeaseBackendError("in-memory lease store is unavailable (test)")

    def record(self, destination: str) -> _Record | None:
        """The raw record, for assertions."""
        with self._lock:
            return self._records.get(destination)

    def acquire(
        self, destination: str, address: str, run_id: str, expiry: float, min_epoch: int
    ) -> int | None:
        """Insert or take over an expired (or own, still active) record."""
        self._check()
        now = self.clock.monotonic()
        with self._lock:
            rec = self._records.get(destination)
            if rec is None:
                epoch = max(0, min_epoch)
            elif rec.expires_at <= now or (rec.run_id == run_id and rec.active):
                epoch = max(rec.epoch + 1, min_epoch)
            else:
                return None
            self._records[destination] = _Record(
                address, run_id, epoch, now + expiry, True, self.clock.time()
            )
            return epoch

    def renew(self, destination: str, run_id: str, epoch: int, expiry: float) -> _Record | None:
        """Extend our record; returns the record as found when it is not ours (or inactive)."""
        self._check()
        now = self.clock.monotonic()
        with self._lock:
            rec = self._records.get(destination)
            if rec is not None and rec.run_id == run_id and rec.epoch == epoch and rec.active:
                self._records[destination] = replace(rec, expires_at=now + expiry)
                return None
            return rec

    def expire(self, destination: str, run_id: str, epoch: int) -> None:
        """Release: expire our record now (its epoch stays)."""
        self._check()
        now = self.clock.monotonic()
        with self._lock:
            rec = self._records.get(destination)
            if rec is not None and rec.run_id == run_id and rec.epoch == epoch:
                self._records[destination] = replace(rec, expires_at=now, active=True)

    def request_release(self, destination: str) -> _Record | None:
        """Operator switch-over: mark a live record inactive."""
        self._check()
        now = self.clock.monotonic()
        with self._lock:
            rec = self._records.get(destination)
            if rec is None or rec.expires_at <= now:
                return None
            self._records[destination] = replace(rec, active=False)
            return self._records[destination]

    def live(self, destination: str) -> _Record | None:
        """The record if not expired."""
        self._check()
        with self._lock:
            rec = self._records.get(destination)
        if rec is None or rec.expires_at <= self.clock.monotonic():
            return None
        return rec

    def join(self, destination: str, member: MemberInfo) -> None:
        """Register a member."""
        with self._lock:
            self._members.setdefault(destination, {})[member.run_id] = member

    def leave(self, destination: str, run_id: str) -> None:
        """Remove a member."""
        with self._lock:
            self._members.get(destination, {}).pop(run_id, None)

    def members(self, destination: str) -> list[MemberInfo]:
        """Registered members."""
        with self._lock:
            return list(self._members.get(destination, {}).values())


class InMemoryLease(Lease):
    """A lease on an :class:`InMemoryLeaseStore`, with the database backend's rules."""

    backend = "memory"
    deadline_is_final = True

    def __init__(
        self,
        store: InMemoryLeaseStore,
        destination: str,
        *,
        address: str | None = None,
        run_id: str | None = None,
        expiry: float = 5.0,
        renew_interval: float = 1.0,
        safety_margin: float | None = None,
        release_cooldown: float | None = None,
        clock: Clock | None = None,
    ) -> None:
        super().__init__(
            destination,
            address=address,
            run_id=run_id,
            clock=clock or store.clock,
            renew_interval=renew_interval,
            poll_interval=renew_interval,
        )
        self.store = store
        self.expiry = expiry
        self.margin = safety_margin if safety_margin is not None else min(1.0, expiry / 4)
        self.release_cooldown = (
            release_cooldown if release_cooldown is not None else 2 * renew_interval + 1.0
        )
        self._not_before = -1e18
        store.join(destination, MemberInfo(self.address, self.run_id, self.clock.time()))

    def _grab_hint(self) -> float | None:
        return self._not_before if self._not_before > self.clock.monotonic() else None

    def try_acquire(self, *, min_epoch: int = 0) -> int | None:
        """One attempt on the store."""
        with self._lock:
            if self._term is not None:
                return self._term.epoch
        if self.clock.monotonic() < self._not_before:
            return None
        t0 = self.clock.monotonic()
        epoch = self.store.acquire(
            self.destination, self.address, self.run_id, self.expiry, min_epoch
        )
        if epoch is not None:
            self._begin_term(epoch, t0 + self.expiry - self.margin)
        return epoch

    def renew(self) -> bool:
        """Extend the record, or end the term with the reason."""
        with self._lock:
            term = self._term
            if term is None:
                return False
            epoch = term.epoch
        t0 = self.clock.monotonic()
        found = self.store.renew(self.destination, self.run_id, epoch, self.expiry)
        if found is None:
            return self._extend(epoch, t0 + self.expiry - self.margin)
        if found.run_id == self.run_id and found.epoch == epoch and not found.active:
            self.store.expire(self.destination, self.run_id, epoch)
            self._not_before = self.clock.monotonic() + self.release_cooldown
            self._lose("released by an operator (manual switch-over)", epoch)
        else:
            self._lose(f"taken over by {found.address} at epoch {found.epoch}", epoch)
        return False

    def release(self) -> None:
        """Expire the record now."""
        with self._lock:
            term = self._term
            if term is None:
                return
            self._end_term()
        self.store.expire(self.destination, self.run_id, term.epoch)

    def _info(self, rec: _Record) -> HolderInfo:
        return HolderInfo(
            destination=self.destination,
            address=rec.address,
            run_id=rec.run_id,
            epoch=rec.epoch,
            active=rec.active,
            since=rec.since,
            expires_at=None,
            backend=self.backend,
        )

    def holder(self) -> HolderInfo | None:
        """The live record."""
        rec = self.store.live(self.destination)
        return self._info(rec) if rec is not None else None

    def request_release(self) -> HolderInfo | None:
        """Mark the live record inactive."""
        rec = self.store.request_release(self.destination)
        return self._info(rec) if rec is not None else None

    def members(self) -> list[MemberInfo]:
        """Members that joined the store."""
        return self.store.members(self.destination)

    def _close_backend(self) -> None:
        self.store.leave(self.destination, self.run_id)
