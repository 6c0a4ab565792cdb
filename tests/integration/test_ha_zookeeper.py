"""The ZooKeeper lease against a real ZooKeeper (tickTime 500 ms): Canal's rules, epochs,
SUSPENDED handling, watches after a server restart, digest ACLs."""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError

from cdc_platform.config.instance import InstanceConfig
from cdc_platform.config.leases import ZooKeeperLeaseConfig
from cdc_platform.config.source import SourceConfig
from cdc_platform.coordination.lease import take_lease
from cdc_platform.errors import LeaseBackendError, LeaseError, LeaseLostError, TooFarBehindError
from cdc_platform.events import ResumePosition
from cdc_platform.ha import ZooKeeperLease
from cdc_platform.ha.running_node import RunningData
from cdc_platform.sink import DeltaChangeLog
from cdc_platform.sink.destination_lake import DestinationLake
from cdc_platform.sink.term import WriteTerm
from cdc_platform.testing.processes import let_time_pass, wait_for
from cdc_platform.testing.tcp_proxy import TcpProxy
from cdc_platform.testing.zookeeper import ZooKeeperServer
from cdc_platform.watch import EventKind, ZooKeeperStateStore

pytestmark = pytest.mark.integration

SESSION = 2.0

MakeLease = Callable[..., ZooKeeperLease]
RESUME = ResumePosition("mysql-bin.000001", 4)


def settings(hosts: str, **values: object) -> ZooKeeperLeaseConfig:
    """The lease settings for ``hosts``: a session of SESSION unless ``values`` say otherwise."""
    return ZooKeeperLeaseConfig.model_validate(
        {"backend": "zookeeper", "hosts": hosts, "session_timeout_seconds": SESSION, **values}
    )


@pytest.fixture
def make_lease(zk_hosts: str) -> Iterator[MakeLease]:
    made: list[ZooKeeperLease] = []

    def make(address: str, **values: object) -> ZooKeeperLease:
        config = settings(zk_hosts, **{"switch_delay_seconds": 0.5, **values})
        lease = ZooKeeperLease(config, "shop", address=address)
        made.append(lease)
        return lease

    yield make
    for lease in made:
        lease.close()


@pytest.fixture
def admin(zk_hosts: str) -> Iterator[KazooClient]:
    client = KazooClient(hosts=zk_hosts, timeout=5.0)
    client.start(timeout=10)
    yield client
    client.stop()
    client.close()


class Acquirer:
    """acquire() in a thread, as a standby process does."""

    def __init__(self, lease: ZooKeeperLease) -> None:
        self.lease = lease
        self.epoch: int | None = None
        self.at: float | None = None
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        self.epoch = self.lease.acquire(stop=self.stop)
        self.at = time.monotonic()

    def wait(self, timeout: float = 30.0) -> int:
        self.thread.join(timeout)
        assert self.epoch is not None, f"{self.lease.address} did not acquire"
        return self.epoch


def test_one_holder_epochs_grow_and_the_running_node_says_who(
    make_lease: MakeLease, admin: KazooClient
) -> None:
    a, b = make_lease("a"), make_lease("b")
    a.start()
    assert a.try_acquire() == 0
    assert b.try_acquire() is None
    raw, stat = admin.get("/cdc/destinations/shop/running")
    data = RunningData.parse(raw)
    assert data is not None
    assert (data.address, data.epoch, data.active) == ("a", 0, True)
    assert stat.ephemeralOwner != 0, "the running node is ephemeral"
    assert {m.address for m in b.members()} == {"a", "b"}, "both compete"
    standby = Acquirer(b)
    deleted_at = time.monotonic()
    a.release()
    assert standby.wait() == 1
    assert standby.at is not None
    assert standby.at - deleted_at >= 0.5 - 0.05, "someone else's node: wait the switch delay"
    assert a.try_acquire() is None
    holder = a.holder()
    assert holder is not None
    assert (holder.address, holder.epoch) == ("b", 1)
    assert a.last_epoch() == 1


def _holder_process(
    zk_hosts: str, *, session: float = SESSION, liveness: bool = False
) -> subprocess.Popen[str]:
    """Another process holding the lease as ``a`` (epoch 0), to be killed by the test; without
    its liveness listener unless asked, so the session expiry is what a standby waits for."""
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\n"
            "from cdc_platform.config.leases import ZooKeeperLeaseConfig\n"
            "from cdc_platform.ha import ZooKeeperLease\n"
            "settings = ZooKeeperLeaseConfig(backend='zookeeper', "
            f"hosts={zk_hosts!r}, session_timeout_seconds={session}, "
            f"liveness={{'enabled': {liveness}}})\n"
            "lease = ZooKeeperLease(settings, 'shop', address='a')\n"
            "print(lease.try_acquire(), flush=True)\n"
            "time.sleep(120)\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None
    if holder.stdout.readline().strip() != "0":
        holder.kill()
        holder.wait(10)
        raise AssertionError("the holder process did not take the lease at epoch 0")
    return holder


def test_a_killed_holder_is_replaced_after_its_session_expires(
    make_lease: MakeLease, zk_hosts: str
) -> None:
    holder = _holder_process(zk_hosts)
    try:
        b = make_lease("b")
        standby = Acquirer(b)
        wait_for(lambda: "b" in {m.address for m in b.members()}, "b to stand by", timeout=10)
        holder.kill()  # kill -9: no clean session close, the node lives until the session expires
        holder.wait(10)
        killed_at = time.monotonic()
        assert standby.wait(30) == 1
        assert standby.at is not None
        assert standby.at - killed_at >= 0.5, "session expiry + switch delay"
    finally:
        holder.kill()
        holder.wait(10)


def test_a_killed_holder_is_replaced_without_the_switch_delay(
    make_lease: MakeLease, zk_hosts: str
) -> None:
    """Its session ended with its member node: nobody to wait for, the 30 s delay is waived."""
    holder = _holder_process(zk_hosts)
    try:
        b = make_lease("b", switch_delay_seconds=30.0)
        standby = Acquirer(b)
        wait_for(lambda: "b" in {m.address for m in b.members()}, "b to stand by", timeout=10)
        holder.kill()
        holder.wait(10)
        standby.thread.join(20)  # session expiry takes 2-3 s; the delay alone would be 30 s
        assert standby.epoch == 1, "b took over once a's session expired, before the delay"
    finally:
        standby.stop.set()
        holder.kill()
        holder.wait(10)


LONG_SESSION = 30.0
"""Long enough that a takeover within it cannot have come from the session expiry."""


def test_a_killed_holder_is_replaced_through_its_liveness_listener_before_its_session_expires(
    make_lease: MakeLease, zk_hosts: str, admin: KazooClient, caplog: pytest.LogCaptureFixture
) -> None:
    """kill -9 closes the holder's listener: b deletes its node and takes over, while the dead
    holder's session (its member node) is still there, and without b's 30 s switch delay."""
    holder = _holder_process(zk_hosts, session=LONG_SESSION, liveness=True)
    standby: Acquirer | None = None
    try:
        raw, _stat = admin.get("/cdc/destinations/shop/running")
        data = RunningData.parse(raw)
        assert data is not None
        assert data.liveness is not None, "the holder publishes its liveness listener"
        caplog.set_level(logging.INFO, logger="cdc_platform.ha")
        b = make_lease("b", switch_delay_seconds=30.0)
        standby = Acquirer(b)
        wait_for(
            lambda: f"probing the holder's liveness listener at {data.liveness}" in caplog.text,
            "b to probe a's liveness listener",
            timeout=10,
        )
        holder.kill()
        holder.wait(10)
        standby.thread.join(LONG_SESSION)
        assert standby.epoch == 1, "b took over"
        assert admin.exists("/cdc/destinations/shop/cluster/a") is not None, (
            "a's session was still alive: the takeover did not wait for its expiry"
        )
    finally:
        if standby is not None:
            standby.stop.set()
        holder.kill()
        holder.wait(10)


def test_a_holder_whose_listener_closed_while_it_lives_loses_to_the_next_epoch(
    make_lease: MakeLease, admin: KazooClient
) -> None:
    """A wrong death signal: b takes over at epoch 1, and a learns it lost from ZooKeeper."""
    a, b = (
        make_lease("a", session_timeout_seconds=LONG_SESSION),
        make_lease("b", switch_delay_seconds=30.0),
    )
    lost: list[LeaseLostError] = []
    a.on_lost(lost.append)
    a.start()
    assert a.try_acquire() == 0
    standby = Acquirer(b)
    wait_for(lambda: "b" in {m.address for m in a.members()}, "b to stand by", timeout=10)
    listener = a.listener
    assert listener is not None
    wait_for(lambda: listener.connections == 1, "b to probe a's listener", timeout=10)
    listener.close()
    assert standby.wait(LONG_SESSION) == 1
    wait_for(lambda: bool(lost), "a to learn that it lost the lease", timeout=10)
    assert not a.is_held()
    assert a.epoch is None
    assert admin.exists("/cdc/destinations/shop/cluster/a") is not None, "a's session lives on"
    holder = b.holder()
    assert holder is not None
    assert (holder.address, holder.epoch) == ("b", 1)


def test_a_holder_that_lives_on_keeps_the_switch_delay(
    make_lease: MakeLease, admin: KazooClient
) -> None:
    """Its member node is still there: the delay stands, however long."""
    a, b = make_lease("a"), make_lease("b", switch_delay_seconds=30.0)
    a.start()
    assert a.try_acquire() == 0
    standby = Acquirer(b)
    wait_for(lambda: "b" in {m.address for m in a.members()}, "b to stand by", timeout=10)
    a.release()
    wait_for(lambda: b.holder() is None, "the running node to go", timeout=10)
    assert b.try_acquire() is None, "a still has its session: b waits the 30 s delay"
    assert standby.epoch is None
    standby.stop.set()
    standby.thread.join(5)


def test_the_holders_member_node_going_later_still_waives_the_delay(
    make_lease: MakeLease, admin: KazooClient
) -> None:
    """A session's nodes go one by one: the member node may go after the running node."""
    a, b = make_lease("a"), make_lease("b", switch_delay_seconds=30.0)
    a.start()
    assert a.try_acquire() == 0
    standby = Acquirer(b)
    wait_for(lambda: "b" in {m.address for m in a.members()}, "b to stand by", timeout=10)
    admin.delete("/cdc/destinations/shop/running")
    wait_for(lambda: b.holder() is None, "the running node to go", timeout=10)
    assert standby.epoch is None, "a's member node is still there: b waits"
    admin.delete("/cdc/destinations/shop/cluster/a")
    standby.thread.join(20)
    assert standby.epoch is not None, "a's member node went too: b took over before the delay"


def test_our_own_node_deleted_is_grabbed_again_at_once(
    make_lease: MakeLease, admin: KazooClient
) -> None:
    """Canal: if the last holder was this process, re-grab at once; others wait the delay."""
    a, b = make_lease("a", switch_delay_seconds=30.0), make_lease("b", switch_delay_seconds=30.0)
    lost: list[LeaseLostError] = []
    a.on_lost(lost.append)
    a.start()
    assert a.try_acquire() == 0
    standby = Acquirer(b)
    wait_for(lambda: "b" in {m.address for m in a.members()}, "b to stand by", timeout=10)
    admin.delete("/cdc/destinations/shop/running")
    wait_for(lambda: bool(lost), "a to notice its node is gone", timeout=10)
    assert "deleted" in lost[0].reason
    assert a.acquire(timeout=10) == 1, "a re-grabs without waiting the 30 s delay"
    standby.stop.set()
    standby.thread.join(5)
    assert standby.epoch is None


def test_active_false_makes_the_holder_release_to_the_standby(make_lease: MakeLease) -> None:
    a, b, ops = make_lease("a"), make_lease("b"), make_lease("ops")
    lost: list[LeaseLostError] = []
    a.on_lost(lost.append)
    a.start()
    b.start()
    assert a.try_acquire() == 0
    standby = Acquirer(b)
    asked = ops.request_release()
    assert asked is not None
    assert asked.address == "a"
    assert not asked.active
    assert standby.wait() == 1
    assert lost
    assert "operator" in lost[0].reason
    assert not a.is_held()
    assert a.acquire(timeout=1.0) is None, "the released holder stays away during its cool-down"
    assert ops.request_release() is not None
    assert a.acquire(timeout=30) == 2, "and takes over when asked to come back"


def test_suspended_stops_writes_and_the_session_survives_a_server_restart(
    make_lease: MakeLease, zookeeper_server: ZooKeeperServer, admin: KazooClient
) -> None:
    # The session must outlive the restart: the server counts a restored session's timeout from
    # its start, and a JVM start plus the client's reconnect backoff can take over 2 s (a CI
    # run saw the session expire, and a loaded one a 10 s session), so this test uses 30 s.
    a = make_lease("a", session_timeout_seconds=30.0)
    lost: list[LeaseLostError] = []
    a.on_lost(lost.append)
    a.start()
    assert a.try_acquire() == 0
    zookeeper_server.stop()
    try:
        wait_for(lambda: not a.is_held(), "SUSPENDED to close the gate", timeout=10)
        assert a.epoch == 0, "SUSPENDED is not a loss"
        assert a.wait_held(0.5) is False, "a writer waits while suspended"
    finally:
        zookeeper_server.start()
    wait_for(a.is_held, "the lease to be confirmed after the restart", timeout=30)
    assert a.epoch == 0, "same session, same term"
    assert not lost
    # The data watch was re-established: deleting the node now is noticed. (The admin's own
    # 5 s session can expire across a slow restart: kazoo's retry waits for its new session.)
    admin.retry(admin.delete, "/cdc/destinations/shop/running")
    wait_for(lambda: bool(lost), "the re-registered watch to report the deletion", timeout=10)


def test_a_reconnect_held_by_a_server_that_does_not_serve_yet_gives_up_within_the_session(
    zk_hosts: str, zookeeper_server: ZooKeeperServer
) -> None:
    """A restarting ZooKeeper binds its port before it serves: a reconnect landing then is held
    unanswered. kazoo alone waits a whole session (one server) for the answer, so the session
    expired although the server served again a second later. Here the held attempt gives up after
    a third of the session and the next one keeps the session (and the lease)."""
    session = 9.0
    chroot = zk_hosts[zk_hosts.index("/") :]
    with TcpProxy((zookeeper_server.host, zookeeper_server.port)) as proxy:
        config = settings(proxy.address + chroot, session_timeout_seconds=session)
        a = ZooKeeperLease(config, "shop", address="a")
        lost: list[LeaseLostError] = []
        a.on_lost(lost.append)
        try:
            assert a.try_acquire() == 0
            proxy.refuse()  # the server is down ...
            wait_for(lambda: not a.is_held(), "SUSPENDED to close the gate", timeout=5)
            let_time_pass(1.5, because="the session's clock runs while the server is down")
            proxy.black_hole()  # ... then binds its port before it serves
            wait_for(lambda: proxy.held >= 1, "a reconnect attempt held unanswered", timeout=5)
            proxy.forward()  # ... and serves again
            wait_for(a.is_held, "the lease confirmed again on the same session", timeout=30)
            assert not lost, f"the session expired while an attempt was held: {lost}"
            assert a.epoch == 0
        finally:
            a.close()


def test_digest_acl_keeps_others_out(zk_hosts: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CDC_TEST_ZK_AUTH", "cdc:s3cret")
    config = settings(zk_hosts, auth_env="CDC_TEST_ZK_AUTH")
    a = ZooKeeperLease(config, "secure", address="a")
    reader = ZooKeeperLease(config, "secure", address="r")
    stranger = KazooClient(hosts=zk_hosts, timeout=5.0)
    try:
        assert a.try_acquire() == 0
        holder = reader.holder()
        assert holder is not None
        assert holder.address == "a"
        stranger.start(timeout=10)
        with pytest.raises(NoAuthError):
            stranger.get("/cdc/destinations/secure/running")
        with pytest.raises(NoAuthError):
            stranger.set("/cdc/destinations/secure/epoch", b"99")
    finally:
        stranger.stop()
        stranger.close()
        a.close()
        reader.close()


def test_unreachable_zookeeper_is_a_transient_backend_error() -> None:
    lease = ZooKeeperLease(settings("127.0.0.1:1"), "shop", connect_timeout=1.0)
    with pytest.raises(LeaseBackendError) as caught:
        lease.try_acquire()
    assert caught.value.transient
    assert lease.acquire(timeout=1.5) is None, "a standby keeps trying instead of failing"
    lease.close()


def test_min_epoch_lifts_a_lease_store_that_is_behind_the_change_log(
    make_lease: MakeLease,
) -> None:
    a, b = make_lease("a"), make_lease("b")
    assert a.try_acquire(min_epoch=12) == 12
    a.release()
    assert b.acquire(timeout=10, min_epoch=5) == 13


@pytest.fixture
def zk_store(zk_hosts: str) -> Iterator[ZooKeeperStateStore]:
    store = ZooKeeperStateStore(zk_hosts, history=4, session_timeout=SESSION)
    yield store
    store.close()


def test_state_store_in_zookeeper_numbers_history_and_fences(
    zk_store: ZooKeeperStateStore, zk_hosts: str
) -> None:
    other = ZooKeeperStateStore(zk_hosts, history=4, session_timeout=SESSION)
    try:
        assert zk_store.put("lease/shop", "a", fence=1) == 1
        assert other.put("lease/shop", "late", fence=0) is None
        assert other.put("status/shop", "x") == 2
        assert [e.index for e in other.events("", 0)] == [1, 2]
        assert [e.key for e in other.events("lease/", 0)] == ["lease/shop"]
        for i in range(5):
            zk_store.put("status/shop", str(i))
        with pytest.raises(TooFarBehindError):
            other.events("", 2)
        assert [e.index for e in other.events("", 3)] == [4, 5, 6, 7]
        listing = other.listing("")
        assert listing.index == 7
        assert {e.key: e.value for e in listing.entries} == {"lease/shop": "a", "status/shop": "4"}
        assert zk_store.delete("status/shop") == 8
        assert other.get("status/shop") is None
        events = other.events("status/", 7)
        assert [(e.kind, e.value) for e in events] == [(EventKind.DELETE, None)]
    finally:
        other.close()


def test_state_store_in_zookeeper_serialises_concurrent_writers(zk_hosts: str) -> None:
    stores = [ZooKeeperStateStore(zk_hosts, history=100, session_timeout=SESSION) for _ in range(3)]
    written: list[int | None] = []
    errors: list[Exception] = []

    def write(store: ZooKeeperStateStore, n: int) -> None:
        try:
            for i in range(15):
                written.append(store.put(f"k/{n}", str(i)))
        except Exception as exc:
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(s, n)) for n, s in enumerate(stores)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    try:
        assert errors == []
        assert sorted(i for i in written if i is not None) == list(range(1, 46))
        assert [e.index for e in stores[0].events("k/", 0)] == list(range(1, 46))
    finally:
        for store in stores:
            store.close()


def test_a_running_node_left_behind_by_an_unreachable_release_is_taken_back(
    make_lease: MakeLease, admin: KazooClient
) -> None:
    """A release that could not reach ZooKeeper leaves our node behind (our session keeps
    it); our next acquisition must not wait for it forever."""
    a = make_lease("a", switch_delay_seconds=30.0)
    a.start()
    admin.ensure_path("/cdc/destinations/shop")
    admin.create("/cdc/destinations/shop/running", RunningData("a", a.run_id, True, 4).to_bytes())
    assert a.acquire(timeout=20) is not None
    raw, _stat = admin.get("/cdc/destinations/shop/running")
    data = RunningData.parse(raw)
    assert data is not None
    assert data.run_id == a.run_id


def test_an_epoch_far_above_the_change_log_is_refused_not_trusted(
    make_lease: MakeLease, admin: KazooClient, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Someone who can write the (ACL-less) ZooKeeper sets the epoch near the integer limit:
    trusted, it would fence every later holder off for good. The holder refuses it."""
    layout = DestinationLake.at(tmp_path, "shop")
    DeltaChangeLog(layout.change_log, "shop").commit((), batch_seq=1, resume=RESUME, epoch=3)
    config = InstanceConfig(
        source=SourceConfig(user="cdc", password_env="CDC_TEST_PASSWORD", server_id=7)
    )
    term = WriteTerm("shop", config, layout)
    lease = make_lease("a")
    lease.start()
    admin.ensure_path(lease.epoch_path)
    admin.set(lease.epoch_path, str(2**62).encode())
    with pytest.raises(LeaseError, match="not written by this platform") as refused:
        take_lease(lease, term, timeout=30)
    assert "back to 3" in str(refused.value)
    assert admin.exists(lease.running_path) is None, "the refused term was released"
    admin.set(lease.epoch_path, b"40")  # an operator set it back (a plausible gap is fine)
    held = take_lease(lease, term, timeout=30)
    assert held is not None
    assert held.epoch == 41
