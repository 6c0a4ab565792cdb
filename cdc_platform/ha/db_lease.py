"""The database lease: one ``master_lock`` row per destination (ServiceComb Alpha's table).

Every ``renew_interval`` the holder runs, in one transaction and on the database's clock::

    INSERT ... (if no row)                                   -> acquired, epoch = min_epoch
    UPDATE ... SET holder = me, epoch = GREATEST(epoch + 1, min_epoch), expire = now + expiry
     WHERE service_name = ? AND (expire_time <= now OR (run_id = me AND active = 1))

and renews with ``UPDATE ... SET expire_time = now + expiry WHERE run_id = me AND epoch = mine
AND active = 1``. Where it does better than the original:

* the database clock decides expiry (``now`` is SQL, times are UTC epoch seconds), so node
  clocks and session time zones do not matter;
* "mine" is this process's run id and epoch, not a ``host:port`` that a restarted process
  would share with its dead predecessor;
* an ``epoch`` column gives every new holder a strictly larger fencing token;
* the holder stops trusting the lease at ``t0 + expiry - margin`` on its own monotonic clock
  (``t0`` taken before the renewal was sent), before anyone else can take it over;
* ``active = 0`` (set by ``cdc-platform release``) asks the holder to let go: it releases at
  its next renewal and stays away for a cool-down so a standby takes over;
* release sets ``expire_time = now`` (the row and its epoch stay), so a standby takes over at
  its next poll instead of after the expiry;
* a standby probes the holder's liveness listener (its address from the node registry,
  :mod:`cdc_platform.ha.liveness`); when the holder's process is proven dead it expires that
  holder's row at once (``WHERE run_id = dead AND epoch = its epoch``) and takes it over.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from cdc_platform.config.leases import DatabaseLeaseConfig
from cdc_platform.errors import CdcError, ConfigError
from cdc_platform.ha.lease import Lease
from cdc_platform.ha.liveness import ProbeFollower
from cdc_platform.ha.members import HolderInfo, MemberInfo, MemberSource
from cdc_platform.ha.registry import NodeRegistry
from cdc_platform.infra.clock import SYSTEM_CLOCK, Clock
from cdc_platform.infra.sqldb import Database, Tx

__all__ = ["DatabaseLease"]

log = logging.getLogger("cdc_platform.ha")

_COLUMNS = (
    "service_name",
    "instance_id",
    "run_id",
    "epoch",
    "locked_time",
    "expire_time",
    "active",
)


@dataclass(frozen=True, slots=True)
class _Row:
    instance_id: str
    run_id: str
    epoch: int
    locked_time: float
    expire_time: float
    active: bool


class DatabaseLease(Lease):
    """A destination's lease in a ``master_lock`` table; see the module docstring."""

    backend = "database"
    deadline_is_final = True

    def __init__(  # noqa: PLR0913 (the settings and the destination; the rest keyword-only: the database, an override, the node registry and the clock)
        self,
        settings: DatabaseLeaseConfig,
        destination: str,
        *,
        db: Database,
        address: str | None = None,
        registry: MemberSource | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        expiry = settings.expiry_seconds
        renew_interval = settings.renew_interval_seconds
        table = settings.table
        # The settings validate all this; checked again here, beside the SQL the table name
        # goes into, for settings made without validation (``model_construct``).
        if renew_interval <= 0 or expiry <= 0:
            raise ConfigError("lease expiry and renew interval must be positive")
        margin = min(1.0, expiry / 4)
        if renew_interval >= expiry - margin:
            raise ConfigError(
                f"lease renew interval {renew_interval:g} s must be shorter than the expiry "
                f"{expiry:g} s minus the safety margin {margin:g} s, or the holder would lose "
                "its own lease between renewals"
            )
        if not table.replace("_", "").isalnum():
            raise ConfigError(f"lease table name {table!r} must be letters, digits and '_'")
        super().__init__(
            destination,
            address=address or settings.address,
            clock=clock,
            renew_interval=renew_interval,
            poll_interval=renew_interval,
        )
        self.db = db
        self.expiry = expiry
        self.margin = margin
        release_cooldown = settings.release_cooldown_seconds
        self.release_cooldown = (
            release_cooldown if release_cooldown is not None else 2 * renew_interval + 1.0
        )
        self.table = table
        self._not_before = 0.0
        self.registry = registry
        self.liveness = settings.liveness
        self._dead_at: float | None = None
        """When a probe expired a dead holder's row: the next attempt is due at once."""
        self._followed: tuple[str, int] | None = None
        self._probes = ProbeFollower(
            self.run_id, self._on_holder_dead, timeout=self.liveness.connect_timeout_seconds
        )

    # -- schema --------------------------------------------------------------------------------

    def _schema(self) -> None:
        d = self.db.dialect
        self.db.ensure_schema(
            f"lease:{self.table}",
            [
                f"""CREATE TABLE IF NOT EXISTS {self.table} (
                    service_name VARCHAR(128) NOT NULL PRIMARY KEY,
                    instance_id VARCHAR(255) NOT NULL,
                    run_id VARCHAR(64) NOT NULL,
                    epoch {d.bigint} NOT NULL,
                    locked_time {d.double} NOT NULL,
                    expire_time {d.double} NOT NULL,
                    active SMALLINT NOT NULL
                )"""
            ],
        )

    def _row(self, tx: Tx, *, lock: bool = False) -> _Row | None:
        suffix = self.db.dialect.for_update if lock else ""
        found = tx.one(
            f"SELECT instance_id, run_id, epoch, locked_time, expire_time, active "
            f"FROM {self.table} WHERE service_name = ?{suffix}",
            (self.destination,),
        )
        if found is None:
            return None
        return _Row(
            str(found[0]),
            str(found[1]),
            int(found[2]),
            float(found[3]),
            float(found[4]),
            bool(found[5]),
        )

    # -- Lease ---------------------------------------------------------------------------------

    def _grab_hint(self) -> float | None:
        if self._dead_at is not None:
            return self._dead_at
        return self._not_before if self._not_before > self.clock.monotonic() else None

    # -- liveness (a standby's direct death signal) ---------------------------------------------

    def _follow(self, row: _Row | None, now: float) -> None:
        """Probe the live holder's listener, found in the node registry (once per term)."""
        if row is None or row.run_id == self.run_id or row.expire_time <= now:
            self._followed = None
            self._probes.follow(None, -1, None)
            return
        if self._followed == (row.run_id, row.epoch) or not isinstance(self.registry, NodeRegistry):
            return
        address = self.registry.liveness_of(self.destination, row.run_id)
        if address is not None:  # else ask again at the next poll: its heartbeat may be late
            self._followed = (row.run_id, row.epoch)
            self._probes.follow(row.run_id, row.epoch, address)

    def _on_holder_dead(self, run_id: str, epoch: int) -> None:
        """A probe proved the holder's process gone (a probe thread): expire its row now, if
        it still is that holder's term, so the next attempt takes it."""
        try:
            with self.db.transaction() as tx:
                now = tx.now()
                expired = tx.execute(
                    f"UPDATE {self.table} SET expire_time = ? WHERE service_name = ? "
                    "AND run_id = ? AND epoch = ? AND expire_time > ?",
                    (now, self.destination, run_id, epoch, now),
                )
        except CdcError as exc:
            log.warning("%s: could not expire a dead holder's lease: %s", self.destination, exc)
            return
        if expired == 1:
            log.warning(
                "%s: the process of the holder at epoch %d is gone (its liveness listener "
                "closed): expired its lease",
                self.destination,
                epoch,
            )
            self._dead_at = self.clock.monotonic()
            self._notify()

    def try_acquire(self, *, min_epoch: int = 0) -> int | None:
        """One insert-or-update-if-expired-or-mine; the new epoch, or None if held elsewhere."""
        with self._lock:
            if self._term is not None:
                return self._term.epoch
        if self.clock.monotonic() < self._not_before:
            return None
        self._dead_at = None
        self._schema()
        floor = max(0, min_epoch)
        seen: _Row | None = None
        t0 = self.clock.monotonic()
        with self.db.transaction() as tx:
            # Lock the row first: concurrent acquirers queue behind it instead of deadlocking.
            existing = self._row(tx, lock=True)
            now = tx.now()
            expire = now + self.expiry
            if existing is None:
                inserted = tx.execute(
                    self.db.dialect.insert_if_absent(self.table, _COLUMNS),
                    (self.destination, self.address, self.run_id, floor, now, expire, 1),
                )
                if inserted != 1:
                    return None  # another process created it a moment ago: it holds the lease
                epoch = floor
            else:
                greatest = self.db.dialect.greatest
                taken = tx.execute(
                    f"UPDATE {self.table} SET instance_id = ?, run_id = ?, "
                    f"epoch = {greatest}(epoch + 1, ?), locked_time = ?, expire_time = ?, "
                    "active = 1 WHERE service_name = ? AND "
                    "(expire_time <= ? OR (run_id = ? AND active = 1))",
                    (
                        self.address,
                        self.run_id,
                        floor,
                        now,
                        expire,
                        self.destination,
                        now,
                        self.run_id,
                    ),
                )
                row = self._row(tx)
                epoch = row.epoch if row is not None else -1
                if taken != 1 or row is None or row.run_id != self.run_id:
                    seen = existing
        if seen is not None:
            self._follow(seen, now)
            return None
        self._probes.follow(None, -1, None)
        self._begin_term(epoch, t0 + self.expiry - self.margin)
        return epoch

    def renew(self) -> bool:
        """Extend the row on the database clock; end the term if the row is no longer ours."""
        with self._lock:
            term = self._term
            if term is None:
                return False
            epoch = term.epoch
        self._schema()
        t0 = self.clock.monotonic()
        released_by_operator = False
        with self.db.transaction() as tx:
            now = tx.now()
            renewed = tx.execute(
                f"UPDATE {self.table} SET locked_time = ?, expire_time = ? "
                "WHERE service_name = ? AND run_id = ? AND epoch = ? AND active = 1",
                (now, now + self.expiry, self.destination, self.run_id, epoch),
            )
            row = None if renewed == 1 else self._row(tx)
            if row is not None and row.run_id == self.run_id and row.epoch == epoch:
                # Ours, but an operator asked us to let go (active = 0): release right here.
                tx.execute(
                    f"UPDATE {self.table} SET expire_time = ?, active = 1 "
                    "WHERE service_name = ? AND run_id = ? AND epoch = ?",
                    (now, self.destination, self.run_id, epoch),
                )
                released_by_operator = True
        if renewed == 1:
            self._extend(epoch, t0 + self.expiry - self.margin)
            return True
        if released_by_operator:
            self._not_before = self.clock.monotonic() + self.release_cooldown
            self._lose("released by an operator (manual switch-over)", epoch)
        elif row is None:
            self._lose("the lease row disappeared", epoch)
        else:
            self._lose(f"taken over by {row.instance_id} at epoch {row.epoch}", epoch)
        return False

    def release(self) -> None:
        """Expire our row now (keeping its epoch), so a standby takes over at its next poll."""
        epoch = self._end_term()
        if epoch is None:
            return
        self._schema()
        with self.db.transaction() as tx:
            now = tx.now()
            tx.execute(
                f"UPDATE {self.table} SET expire_time = ?, active = 1 "
                "WHERE service_name = ? AND run_id = ? AND epoch = ?",
                (now, self.destination, self.run_id, epoch),
            )
        log.info("%s: lease released by %s (epoch %d)", self.destination, self.address, epoch)

    def holder(self) -> HolderInfo | None:
        """The live holder (row not expired on the database clock), or None."""
        self._schema()
        with self.db.transaction() as tx:
            now = tx.now()
            row = self._row(tx)
        if row is None or row.expire_time <= now:
            return None
        return self._info(row)

    def _info(self, row: _Row) -> HolderInfo:
        return HolderInfo(
            destination=self.destination,
            address=row.instance_id,
            run_id=row.run_id,
            epoch=row.epoch,
            active=row.active,
            since=row.locked_time,
            expires_at=row.expire_time,
            backend=self.backend,
        )

    def last_epoch(self) -> int | None:
        """The newest epoch handed out for this destination (held or not), or None."""
        self._schema()
        with self.db.transaction() as tx:
            row = self._row(tx)
        return row.epoch if row is not None else None

    def request_release(self) -> HolderInfo | None:
        """Set ``active = 0`` on a live row: its holder releases at its next renewal."""
        self._schema()
        with self.db.transaction() as tx:
            now = tx.now()
            tx.execute(
                f"UPDATE {self.table} SET active = 0 WHERE service_name = ? AND expire_time > ?",
                (self.destination, now),
            )
            row = self._row(tx)
        if row is None or row.expire_time <= now:
            return None
        return self._info(row)

    def members(self) -> list[MemberInfo]:
        """Members from the node registry, when one is attached; else just the holder."""
        if self.registry is not None:
            return self.registry.members(self.destination)
        holder = self.holder()
        if holder is None:
            return []
        return [MemberInfo(holder.address, holder.run_id, holder.since, holder.since)]

    def _close_backend(self) -> None:
        self._probes.stop()
        self.db.close()
