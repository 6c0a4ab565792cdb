"""The database lease, node registry and state-watch store on SQLite, MariaDB and PostgreSQL.

The same tests run against each database, on its own clock (real time, short expiry). MariaDB
and PostgreSQL are the session's private servers (tests/conftest.py); nothing is skipped.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from cdc_platform.config.leases import DatabaseLeaseConfig
from cdc_platform.errors import LeaseLostError, TooFarBehindError, WatchError
from cdc_platform.ha import DatabaseLease, NodeRegistry
from cdc_platform.infra.sqldb import Database
from cdc_platform.testing.mariadb import MariaDBServer
from cdc_platform.testing.postgresql import PostgreSQLServer
from cdc_platform.testing.processes import wait_for
from cdc_platform.watch import SqlStateStore
from tests.conftest import MariaDBDatabase

pytestmark = pytest.mark.integration


@dataclass
class Target:
    """One database to test on, with table names unique to the test."""

    url: str
    suffix: str

    def db(self, **kwargs: object) -> Database:
        return Database(self.url, **kwargs)

    @property
    def lock_table(self) -> str:
        return f"master_lock_{self.suffix}"

    @property
    def registry_table(self) -> str:
        return f"cdc_nodes_{self.suffix}"

    @property
    def state_prefix(self) -> str:
        return f"cdc_state_{self.suffix}"


@pytest.fixture(params=["sqlite", "mariadb", "postgresql"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Target]:
    suffix = uuid.uuid4().hex[:8]
    if request.param == "sqlite":
        yield Target(f"sqlite:///{tmp_path}/lease.db", suffix)
        return
    if request.param == "mariadb":
        db: MariaDBDatabase = request.getfixturevalue("mariadb")
        yield Target(f"mysql://root@{db.server.host}:{db.server.port}/{db.name}", suffix)
        return
    postgresql: PostgreSQLServer = request.getfixturevalue("postgresql_server")
    if not postgresql.running:
        postgresql.start()
    target = Target(postgresql.url, suffix)
    yield target
    cleanup = target.db()
    with cleanup.transaction() as tx:
        for table in (
            target.lock_table,
            target.registry_table,
            target.state_prefix,
            f"{target.state_prefix}_events",
            f"{target.state_prefix}_meta",
        ):
            tx.execute(f"DROP TABLE IF EXISTS {table}")
    cleanup.close()


@pytest.fixture
def make_lease(target: Target) -> Iterator[Callable[..., DatabaseLease]]:
    made: list[DatabaseLease] = []

    def make(address: str) -> DatabaseLease:
        settings = DatabaseLeaseConfig(
            backend="database",
            expiry_seconds=1.0,
            renew_interval_seconds=0.2,
            table=target.lock_table,
        )
        lease = DatabaseLease(settings, "shop", db=target.db(), address=address)
        made.append(lease)
        return lease

    yield make
    for lease in made:
        lease.close()


def test_exclusive_then_taken_over_on_the_database_clock(
    make_lease: Callable[..., DatabaseLease],
) -> None:
    a, b = make_lease("a"), make_lease("b")
    assert a.try_acquire() == 0
    assert b.try_acquire() is None
    holder = b.holder()
    assert holder is not None
    assert (holder.address, holder.epoch, holder.active) == ("a", 0, True)
    assert holder.expires_at is not None
    assert holder.since is not None
    assert 0.9 < holder.expires_at - holder.since < 1.1, "expiry computed by the database"
    epoch = b.acquire(timeout=30)  # a does not renew: its row expires on the database clock
    assert epoch == 1
    assert not a.is_held(), "a stopped trusting its lease before b could take it"


def test_renewing_holder_keeps_it_and_release_hands_it_over(
    make_lease: Callable[..., DatabaseLease],
) -> None:
    a, b = make_lease("a"), make_lease("b")
    a.start()
    assert a.try_acquire() == 0
    assert b.acquire(timeout=3.0) is None, "three expiry periods: renewals kept it"
    assert a.is_held()
    assert a.epoch == 0
    a.release()
    assert b.acquire(timeout=30) == 1


def test_operator_release_switches_to_the_standby(make_lease: Callable[..., DatabaseLease]) -> None:
    a, b, ops = make_lease("a"), make_lease("b"), make_lease("ops")
    lost: list[LeaseLostError] = []
    a.on_lost(lost.append)
    a.start()
    assert a.try_acquire() == 0
    got: list[int | None] = []
    standby = threading.Thread(target=lambda: got.append(b.acquire(timeout=30)), daemon=True)
    standby.start()
    asked = ops.request_release()
    assert asked is not None
    assert asked.address == "a"
    standby.join(35)
    assert got == [1]
    assert lost
    assert "operator" in lost[0].reason
    assert ops.request_release() is not None, "b is live and can be asked in turn"


def test_concurrent_acquirers_never_share_an_epoch(
    make_lease: Callable[..., DatabaseLease],
) -> None:
    leases = [make_lease(f"n{i}") for i in range(4)]
    epochs: list[int | None] = []
    errors: list[Exception] = []
    lock = threading.Lock()

    def grab(lease: DatabaseLease) -> None:
        try:
            for _ in range(5):
                epoch = lease.try_acquire()
                with lock:
                    epochs.append(epoch)
                if epoch is not None:
                    lease.release()
        except Exception as exc:
            errors.append(exc)

    threads = [threading.Thread(target=grab, args=(lease,)) for lease in leases]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == [], "concurrent acquirers must queue, not deadlock"
    won = [e for e in epochs if e is not None]
    assert won, "someone must have won"
    assert len(won) == len(set(won)), f"an epoch was handed out twice: {sorted(won)}"


def test_registry_heartbeats_and_bounded_cleanup(target: Target) -> None:
    registry = NodeRegistry(
        target.db(), table=target.registry_table, expiry=60.0, retention=60.0, batch=10
    )
    for i in range(25):
        registry.heartbeat("shop", f"host:{i}", f"run{i}", role="standby")
    registry.heartbeat("shop", "host:0", "run0", role="active", epoch=3)
    rows = registry.rows("shop")
    assert len(rows) == 25
    assert next(r for r in rows if r.address == "host:0").role == "active"
    assert {m.address for m in registry.members("shop")} == {f"host:{i}" for i in range(25)}
    # Age 24 rows by two minutes (as if their processes died), keep host:0 fresh.
    with registry.db.transaction() as tx:
        tx.execute(
            f"UPDATE {target.registry_table} SET heartbeat_at = heartbeat_at - 120 "
            "WHERE address <> ?",
            ("host:0",),
        )
    assert registry.mark_expired() == 10, "one bounded batch"
    report = registry.maintain()
    assert report.marked == 14
    assert report.cleaned == 24, "marked rows past the retention are deleted in batches"
    assert report.batches >= 5
    assert [r.address for r in registry.rows("shop", include_deleted=True)] == ["host:0"]
    # A node that was paused past its expiry comes back with a new id.
    old_id = registry.rows("shop")[0].id
    registry.leave("shop", "host:0", "run0")
    assert registry.rows("shop") == []
    registry.heartbeat("shop", "host:0", "run0", role="standby")
    assert registry.rows("shop")[0].id > old_id
    registry.db.close()


def test_state_store_numbers_history_and_fences(target: Target) -> None:
    store = SqlStateStore(target.db(error=WatchError), history=4, prefix=target.state_prefix)
    other = SqlStateStore(target.db(error=WatchError), history=4, prefix=target.state_prefix)
    try:
        assert store.put("lease/shop", "a", fence=1) == 1
        assert other.put("lease/shop", "late", fence=0) is None
        assert other.put("status/shop", "x") == 2
        assert [e.index for e in other.events("", 0)] == [1, 2]
        for i in range(5):
            store.put("status/shop", str(i))
        with pytest.raises(TooFarBehindError):
            other.events("", 2)
        listing = other.listing("")
        assert listing.index == 7
        assert {e.key: e.value for e in listing.entries} == {"lease/shop": "a", "status/shop": "4"}
    finally:
        store.close()
        other.close()


def test_state_store_writers_commit_indexes_in_order(target: Target) -> None:
    """Concurrent writers on separate connections: indexes 1..N, no gap, no duplicate."""
    stores = [
        SqlStateStore(target.db(error=WatchError), history=1000, prefix=target.state_prefix)
        for _ in range(3)
    ]
    written: list[int | None] = []
    lock = threading.Lock()

    errors: list[Exception] = []

    def write(store: SqlStateStore, n: int) -> None:
        try:
            for i in range(20):
                index = store.put(f"k/{n}", str(i))
                with lock:
                    written.append(index)
        except Exception as exc:
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(s, n)) for n, s in enumerate(stores)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []
    assert sorted(i for i in written if i is not None) == list(range(1, 61))
    events = stores[0].events("k/", 0)
    assert [e.index for e in events] == list(range(1, 61))
    for store in stores:
        store.close()


@pytest.mark.parametrize("kind", ["mariadb", "postgresql"])
def test_lease_recovers_its_connection_after_the_database_restarts(
    request: pytest.FixtureRequest, kind: str
) -> None:
    server: MariaDBServer | PostgreSQLServer
    if kind == "mariadb":
        db: MariaDBDatabase = request.getfixturevalue("mariadb")
        server = db.server
        url = f"mysql://root@{server.host}:{server.port}/{db.name}"
    else:
        server = request.getfixturevalue("postgresql_server")
        url = server.url
    table = f"master_lock_{uuid.uuid4().hex[:8]}"
    settings = DatabaseLeaseConfig(
        backend="database", expiry_seconds=3.0, renew_interval_seconds=0.3, table=table
    )
    a = DatabaseLease(settings, "shop", db=Database(url), address="a")
    lost: list[LeaseLostError] = []
    a.on_lost(lost.append)
    try:
        assert a.try_acquire() == 0
        server.restart()
        a.start()
        wait_for(lambda: a.is_held() or bool(lost), "a renewal or a loss after the restart")
        # Either outcome is safe (the restart may outlast the validity); what matters is that
        # the lease object reconnects by itself and holds the lease again.
        epoch = a.acquire(timeout=30)
        assert epoch is not None
        wait_for(a.is_held, "the lease to be held")
    finally:
        a.close()
