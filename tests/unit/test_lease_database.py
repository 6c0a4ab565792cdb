"""The database lease on SQLite with injected clocks: expiry, renewal, release, clock skew.

No test sleeps: the node clock (validity deadlines) and the database clock (``cdc_now()``, which
decides expiry) are fakes moved by the test. Two lease objects on two connections to one file
play two processes.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from pydantic import ValidationError

from cdc_platform.config.leases import DatabaseLeaseConfig, LivenessConfig
from cdc_platform.errors import ConfigError, LeaseBackendError, LeaseLostError
from cdc_platform.ha import DatabaseLease, NodeRegistry
from cdc_platform.infra.sqldb import Database
from cdc_platform.testing.fakes import FakeClock
from cdc_platform.testing.processes import wait_for

pytestmark = pytest.mark.unit

EXPIRY = 5.0
RENEW = 1.0
MARGIN = 1.0  # min(1, expiry / 4)
DEFAULTS = DatabaseLeaseConfig(backend="database")


class DbClock:
    """The database server's clock: runs at the node's fake rate, from its own origin, plus a
    settable skew (a step of the server's clock). Independent of the node's wall clock."""

    def __init__(self, node: FakeClock, skew: float = 0.0) -> None:
        self.node = node
        self.origin = node.monotonic()
        self.skew = skew

    def __call__(self) -> float:
        return 1_800_000_000.0 + (self.node.monotonic() - self.origin) + self.skew


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def db_clock(clock: FakeClock) -> DbClock:
    return DbClock(clock)


@pytest.fixture
def make(tmp_path: Path, clock: FakeClock, db_clock: DbClock) -> Callable[..., DatabaseLease]:
    def factory(
        address: str, *, registry: NodeRegistry | None = None, **settings: object
    ) -> DatabaseLease:
        db = Database(f"sqlite:///{tmp_path}/lease.db", db_clock=db_clock)
        config = DatabaseLeaseConfig.model_validate(
            {
                "backend": "database",
                "expiry_seconds": EXPIRY,
                "renew_interval_seconds": RENEW,
                **settings,
            }
        )
        return DatabaseLease(config, "shop", db=db, address=address, registry=registry, clock=clock)

    return factory


def test_first_holder_gets_epoch_zero_and_excludes_others(
    make: Callable[..., DatabaseLease],
) -> None:
    a, b = make("a"), make("b")
    assert a.try_acquire() == 0
    assert a.is_held()
    assert a.epoch == 0
    assert b.try_acquire() is None
    assert not b.is_held()
    holder = b.holder()
    assert holder is not None
    assert holder.address == "a"
    assert holder.epoch == 0


def test_unrenewed_lease_expires_on_the_database_clock(
    make: Callable[..., DatabaseLease], clock: FakeClock
) -> None:
    a, b = make("a"), make("b")
    lost: list[LeaseLostError] = []
    a.on_lost(lost.append)
    assert a.try_acquire() == 0
    clock.advance(EXPIRY - 0.01)
    assert b.try_acquire() is None, "not expired yet on the database clock"
    clock.advance(0.02)
    assert b.try_acquire() == 1, "expired: the next holder gets a larger epoch"
    assert not a.is_held()
    a.tick()
    assert len(lost) == 1
    assert lost[0].epoch == 0
    assert "not renewed" in lost[0].reason


def test_renewal_keeps_the_lease_indefinitely(
    make: Callable[..., DatabaseLease], clock: FakeClock
) -> None:
    a, b = make("a"), make("b")
    assert a.try_acquire() == 0
    for _ in range(30):  # 30 s, six expiry periods
        clock.advance(RENEW)
        a.tick()
        assert a.is_held()
        assert b.try_acquire() is None
    assert a.epoch == 0, "renewal never changes the epoch"


def test_holder_stops_trusting_before_anyone_can_take_over(
    make: Callable[..., DatabaseLease], clock: FakeClock
) -> None:
    """The safety property: at every instant, at most one lease object believes it holds."""
    a, b = make("a"), make("b")
    assert a.try_acquire() == 0
    step = 0.05
    took_over = False
    for _ in range(int(2 * EXPIRY / step)):
        clock.advance(step)
        b_got = b.try_acquire() is not None if not took_over else b.is_held()
        took_over = took_over or b_got
        assert not (a.is_held() and b.is_held()), "two holders at once"
        if took_over:
            break
    assert took_over
    assert not a.is_held()


def test_local_validity_is_measured_from_before_the_request(
    make: Callable[..., DatabaseLease], clock: FakeClock
) -> None:
    a = make("a")
    assert a.try_acquire() == 0
    clock.advance(EXPIRY - MARGIN - 0.01)
    assert a.is_held()
    clock.advance(0.02)
    assert not a.is_held(), "stops at t0 + expiry - margin, before the row expires"
    with pytest.raises(LeaseLostError):
        a.wait_held(0.0)


def test_release_lets_a_standby_take_over_at_once(
    make: Callable[..., DatabaseLease], clock: FakeClock
) -> None:
    a, b = make("a"), make("b")
    assert a.try_acquire() == 0
    a.release()
    assert not a.is_held()
    assert b.holder() is None
    assert b.try_acquire() == 1, "no need to wait for the expiry"


def test_operator_release_moves_the_lease_to_the_standby(
    make: Callable[..., DatabaseLease], clock: FakeClock
) -> None:
    a, b = make("a"), make("b")
    lost: list[LeaseLostError] = []
    a.on_lost(lost.append)
    assert a.try_acquire() == 0
    asked = b.request_release()
    assert asked is not None
    assert asked.address == "a"
    assert not asked.active
    assert a.is_held(), "the holder learns it at its next renewal"
    clock.advance(RENEW)
    a.tick()
    assert not a.is_held()
    assert lost
    assert "operator" in lost[0].reason
    assert a.try_acquire() is None, "the released holder stays away during its cool-down"
    assert b.try_acquire() == 1
    holder = a.holder()
    assert holder is not None
    assert holder.address == "b"
    assert holder.active


def test_released_holder_comes_back_after_the_cooldown_when_alone(
    make: Callable[..., DatabaseLease], clock: FakeClock
) -> None:
    a = make("a", release_cooldown_seconds=4.0)
    assert a.try_acquire() == 0
    a.request_release()
    clock.advance(RENEW)
    a.tick()
    assert a.try_acquire() is None
    epoch = a.acquire(timeout=10.0)
    assert epoch == 1
    assert 2.5 <= clock.slept <= 10.0, "acquire waited out the cool-down on the fake clock"


def test_acquire_waits_for_the_holder_to_expire(
    make: Callable[..., DatabaseLease], clock: FakeClock
) -> None:
    a, b = make("a"), make("b")
    assert a.try_acquire() == 0
    start = clock.monotonic()
    assert b.acquire(timeout=30.0) == 1
    waited = clock.monotonic() - start
    assert EXPIRY <= waited <= EXPIRY + RENEW + 0.1


def test_acquire_gives_up_at_its_timeout(
    make: Callable[..., DatabaseLease], clock: FakeClock
) -> None:
    a, b = make("a"), make("b")
    assert a.try_acquire() == 0
    for _ in range(3):
        clock.advance(RENEW)
        a.tick()
    assert b.acquire(timeout=2.0) is None


def test_min_epoch_raises_the_floor(make: Callable[..., DatabaseLease], clock: FakeClock) -> None:
    a, b = make("a"), make("b")
    assert a.try_acquire(min_epoch=7) == 7
    a.release()
    assert b.try_acquire(min_epoch=3) == 8, "never below the store's own counter"
    b.release()
    assert a.try_acquire(min_epoch=20) == 20


def test_every_new_term_has_a_larger_epoch_even_for_the_same_holder(
    make: Callable[..., DatabaseLease], clock: FakeClock
) -> None:
    a = make("a")
    epochs = []
    for _ in range(4):
        epochs.append(a.try_acquire())
        a.release()
    assert epochs == [0, 1, 2, 3]


def test_a_lease_lost_locally_is_retaken_by_its_owner_with_a_new_epoch(
    make: Callable[..., DatabaseLease], clock: FakeClock
) -> None:
    a = make("a")
    assert a.try_acquire() == 0
    clock.advance(EXPIRY - MARGIN)  # paused: local validity gone, row not yet expired
    a.tick()
    assert not a.is_held()
    assert a.try_acquire() == 1, "the row is still ours: take it back at once, new term"


def test_node_wall_clock_steps_do_not_matter(
    make: Callable[..., DatabaseLease], clock: FakeClock
) -> None:
    a, b = make("a"), make("b")
    assert a.try_acquire() == 0
    clock.jump_wall(3600.0)  # the holder's wall clock jumps an hour ahead (NTP step)
    clock.advance(RENEW)
    a.tick()
    assert a.is_held()
    assert b.try_acquire() is None
    clock.jump_wall(-7200.0)  # and then an hour behind the database
    clock.advance(RENEW)
    a.tick()
    assert a.is_held()
    assert b.try_acquire() is None


def test_database_clock_skew_decides_expiry_not_the_node_clock(
    make: Callable[..., DatabaseLease], clock: FakeClock, db_clock: DbClock
) -> None:
    """The database is 10 minutes ahead of the nodes: nothing changes, because expiry is
    computed and compared on the database clock only (ServiceComb would need synced clocks)."""
    db_clock.skew = 600.0
    a, b = make("a"), make("b")
    assert a.try_acquire() == 0
    holder = b.holder()
    assert holder is not None
    assert holder.expires_at is not None
    assert holder.expires_at == pytest.approx(db_clock() + EXPIRY)
    assert holder.expires_at - clock.time() > 600.0, "the node's clock is not involved"
    clock.advance(RENEW)
    a.tick()
    assert b.try_acquire() is None
    clock.advance(EXPIRY + 0.01)
    assert b.try_acquire() == 1


def test_a_database_clock_step_is_caught_by_the_epoch(
    make: Callable[..., DatabaseLease], clock: FakeClock, db_clock: DbClock
) -> None:
    """A forward step of the database clock expires the row early: the old holder still
    trusts its local deadline for a moment, but the new holder has a larger epoch, which the
    change log uses to refuse the old holder's commits (tested with the sink)."""
    a, b = make("a"), make("b")
    assert a.try_acquire() == 0
    db_clock.skew = EXPIRY + 1.0
    assert b.try_acquire() == 1
    assert a.is_held(), "documented limit of any clock-based lease"
    assert (b.epoch or 0) > (a.epoch or 0)
    clock.advance(RENEW)
    a.tick()
    assert not a.is_held(), "its next renewal finds the row taken"


def test_store_errors_are_lease_backend_errors(tmp_path: Path, clock: FakeClock) -> None:
    (tmp_path / "dir.db").mkdir()
    db = Database(f"sqlite:///{tmp_path}/dir.db")
    lease = DatabaseLease(DEFAULTS, "shop", db=db, address="a", clock=clock)
    with pytest.raises(LeaseBackendError) as caught:
        lease.try_acquire()
    assert caught.value.transient


def test_store_outage_ends_the_term_at_the_deadline(
    make: Callable[..., DatabaseLease], clock: FakeClock, tmp_path: Path
) -> None:
    a = make("a")
    lost: list[LeaseLostError] = []
    a.on_lost(lost.append)
    assert a.try_acquire() == 0
    a.db.close()
    (tmp_path / "lease.db").unlink()
    (tmp_path / "lease.db").mkdir()  # the "database" is now unusable
    clock.advance(RENEW)
    a.tick()  # renewal fails: logged, the term goes on until its deadline
    assert a.is_held()
    clock.advance(EXPIRY)
    a.tick()
    assert not a.is_held()
    assert lost
    assert lost[0].epoch == 0


def test_bad_settings_are_refused(tmp_path: Path) -> None:
    db = Database(f"sqlite:///{tmp_path}/x.db")
    with pytest.raises(ValidationError, match="renew_interval_seconds"):
        DatabaseLeaseConfig(backend="database", expiry_seconds=2.0, renew_interval_seconds=1.6)
    with pytest.raises(ValidationError, match="table"):
        DatabaseLeaseConfig(backend="database", table="x; DROP TABLE y")
    # Settings made without validation: the lease refuses them itself.
    unchecked = DatabaseLeaseConfig.model_construct
    with pytest.raises(ConfigError, match="renew interval"):
        DatabaseLease(unchecked(expiry_seconds=2.0, renew_interval_seconds=1.6), "shop", db=db)
    with pytest.raises(ConfigError, match="table"):
        DatabaseLease(unchecked(table="x; DROP TABLE y"), "shop", db=db)


def test_relative_sqlite_path_is_under_the_base_dir(tmp_path: Path) -> None:
    db = Database("sqlite:///var/lease.db", base_dir=tmp_path)
    assert db.url.path == tmp_path / "var" / "lease.db"
    lease = DatabaseLease(DEFAULTS, "shop", db=db, address="a")
    assert lease.try_acquire() == 0
    lease.close()
    assert (tmp_path / "var" / "lease.db").exists()


def test_a_holder_proven_dead_by_its_liveness_listener_is_taken_over_before_its_expiry(
    make: Callable[..., DatabaseLease], tmp_path: Path, clock: FakeClock, db_clock: DbClock
) -> None:
    """The holder's listener closes (as at a kill -9, or wrongly while it lives): the standby
    expires that holder's row at once and takes epoch + 1, and the holder, if it lives, loses
    at its next renewal. The clocks stand still: the row's expiry never comes into it."""
    registry = NodeRegistry(Database(f"sqlite:///{tmp_path}/lease.db", db_clock=db_clock))
    liveness = LivenessConfig(host="127.0.0.1")
    a = make("a", registry=registry, liveness=liveness)
    b = make("b", registry=registry, liveness=liveness)
    lost: list[LeaseLostError] = []
    a.on_lost(lost.append)
    assert a.try_acquire() == 0
    address = a.liveness_address()
    assert address is not None
    registry.heartbeat("shop", "a", a.run_id, role="active", epoch=0, info={"liveness": address})
    assert b.try_acquire() is None, "a's row is live: b probes a's listener"
    listener = a.listener
    assert listener is not None
    wait_for(lambda: listener.connections == 1, "b's probe to connect", timeout=10)
    listener.close()
    wait_for(lambda: b.holder() is None, "b to expire a's row", timeout=10)
    assert b.try_acquire() == 1
    assert not a.renew()
    assert lost
    assert "taken over by b at epoch 1" in lost[0].reason
    a.close()
    b.close()
