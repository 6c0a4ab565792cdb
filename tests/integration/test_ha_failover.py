"""Two `cdc-platform run` processes on one destination, under a continuous workload.

Real MariaDB (source, and lease database), real ZooKeeper (tickTime 500 ms, 2 s sessions),
real Delta tables. Each scenario ends with the same proof: the change log replays to exactly
the source tables, with no duplicate and no gap, and its commits carry non-decreasing epochs in
commit order (a deposed holder never committed after its successor).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from cdc_platform.ha.running_node import RunningData
from cdc_platform.testing.ha import (
    Cluster,
    Node,
    commit_history,
    exactly_once_problems,
    fast_database_lease,
    fast_zookeeper_lease,
    row_order_problems,
)
from cdc_platform.testing.workload import Workload
from cdc_platform.testing.zookeeper import ZooKeeperServer
from tests.conftest import MariaDBDatabase

pytestmark = pytest.mark.integration

RATE = 40.0
"""Workload transactions per second: continuous, but leaves the 2 cores some air."""

MakeCluster = Callable[[str], Cluster]


@pytest.fixture
def make_cluster(mariadb: MariaDBDatabase, tmp_path: Path) -> Iterator[MakeCluster]:
    made: list[Cluster] = []

    def make(lease_yaml: str) -> Cluster:
        cluster = Cluster(tmp_path, mariadb.server, mariadb.user, mariadb.name, lease_yaml)
        made.append(cluster)
        return cluster

    yield make
    for cluster in made:
        cluster.close()


def lease_yaml(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if backend == "zookeeper":
        hosts: str = request.getfixturevalue("zk_hosts")
        return fast_zookeeper_lease(hosts)
    if backend == "sqlite":
        return fast_database_lease(f"sqlite:///{tmp_path}/shared/lease.db")
    url: str = request.getfixturevalue("mariadb_lease_url")
    return fast_database_lease(url)


@pytest.fixture
def mariadb_lease_url(mariadb: MariaDBDatabase) -> Iterator[str]:
    """A lease database next to (not inside) the captured one: the lease tables change every
    renewal, and capturing them would feed the change log with its own lease traffic."""
    with mariadb.server.database(f"{mariadb.name}_ha") as name:
        yield f"mysql://root@{mariadb.server.host}:{mariadb.server.port}/{name}"


def start_active_and_standby(cluster: Cluster, workload: Workload) -> tuple[Node, Node, int]:
    """node-a active and streaming, node-b standing by; returns a's epoch."""
    workload.create_schema()
    a = cluster.start("node-a")
    held = cluster.wait_holder(a)
    cluster.wait(lambda: cluster.checkpoint() is not None, "node-a's first commit")
    b = cluster.start("node-b")
    cluster.wait(lambda: "standby" in b.text(), "node-b to stand by")
    workload.start(rate_per_second=RATE)
    cluster.wait_rows_beyond(0)
    return a, b, held.epoch


def finish(cluster: Cluster, workload: Workload, *survivors: Node) -> None:
    """Stop the workload, let the holder drain, stop everyone cleanly, check exactly-once."""
    # Its rate is per second of a machine that may be busy: wait for the transactions, not a
    # time (a loaded run stopped it at 19).
    cluster.wait(lambda: workload.stats.committed > 20, "the workload's first 21 transactions")
    workload.stop()
    assert workload.stats.committed > 20, "the workload must really have run"
    cluster.wait_caught_up()
    for node in survivors:
        assert node.alive, f"{node.address} died:\n{cluster.logs()}"
        assert node.stop() == 0, cluster.logs()
    assert exactly_once_problems(cluster.server, cluster.database, cluster.uri) == []
    assert row_order_problems(cluster.uri) == []
    history = commit_history(cluster.uri)
    batches = [c.batch_seq for c in history]
    assert batches == sorted(set(batches)), "one commit per batch, in batch order"
    epochs = [c.epoch for c in history]
    assert epochs == sorted(epochs), f"an older epoch committed after a newer one: {epochs}"


@pytest.mark.parametrize("backend", ["zookeeper", "sqlite", "mariadb"])
def test_kill_nine_of_the_active_the_standby_takes_over(
    backend: str,
    make_cluster: MakeCluster,
    mariadb: MariaDBDatabase,
    request: pytest.FixtureRequest,
    tmp_path: Path,
) -> None:
    cluster = make_cluster(lease_yaml(backend, request, tmp_path))
    workload = Workload(mariadb.server, mariadb.name, seed=21)
    a, b, epoch_a = start_active_and_standby(cluster, workload)
    a.kill()
    taken = cluster.wait_holder(b, above=epoch_a)
    cluster.wait_claimed(taken.epoch)
    keep_streaming(cluster, workload)
    finish(cluster, workload, b)
    assert {c.epoch for c in commit_history(cluster.uri)} >= {epoch_a, taken.epoch}


def cli(cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cdc_platform.cli", *args, "--conf", str(cluster.conf)],
        capture_output=True,
        text=True,
        env=cluster.env,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize("backend", ["zookeeper", "sqlite"])
def test_manual_release_switches_over_and_back(
    backend: str,
    make_cluster: MakeCluster,
    mariadb: MariaDBDatabase,
    request: pytest.FixtureRequest,
    tmp_path: Path,
) -> None:
    cluster = make_cluster(lease_yaml(backend, request, tmp_path))
    workload = Workload(mariadb.server, mariadb.name, seed=22)
    a, b, epoch_a = start_active_and_standby(cluster, workload)

    released = cli(cluster, "release", "--destination", cluster.destination)
    assert released.returncode == 0, released.stderr
    assert "node-a" in released.stdout
    taken = cluster.wait_holder(b, above=epoch_a)
    cluster.wait_claimed(taken.epoch)
    cluster.wait(lambda: "released by an operator" in a.text(), "node-a to step aside")
    assert a.alive, "a released holder goes back to standby, it does not exit"
    cluster.wait_rows_beyond(cluster.rows())

    def published() -> bool:
        state = cluster.state(f"status/{cluster.destination}")
        return state is not None and state["epoch"] == taken.epoch

    cluster.wait(published, "node-b to publish its status to the state watch")
    status = cli(cluster, "status", "--json")
    assert status.returncode == 0, status.stdout + status.stderr
    (shown,) = json.loads(status.stdout)
    assert shown["holder"]["address"] == "node-b"
    assert shown["holder"]["epoch"] == taken.epoch
    assert shown["table_epoch"] == taken.epoch
    assert shown["position"].startswith("mysql-bin.")
    assert "node-a" in {m["address"] for m in shown["members"]}
    assert shown["status_epoch"] == taken.epoch
    assert shown["lag_seconds"] is not None

    again = cli(cluster, "release", "--destination", cluster.destination)
    assert again.returncode == 0, again.stderr
    back = cluster.wait_holder(a, above=taken.epoch)
    cluster.wait_claimed(back.epoch)
    cluster.wait_rows_beyond(cluster.rows())
    finish(cluster, workload, a, b)


@pytest.mark.parametrize("backend", ["zookeeper", "sqlite"])
def test_split_brain_a_paused_holder_writes_nothing_after_the_takeover(
    backend: str,
    make_cluster: MakeCluster,
    mariadb: MariaDBDatabase,
    request: pytest.FixtureRequest,
    tmp_path: Path,
) -> None:
    cluster = make_cluster(lease_yaml(backend, request, tmp_path))
    workload = Workload(mariadb.server, mariadb.name, seed=23)
    a, b, epoch_a = start_active_and_standby(cluster, workload)

    a.signal(signal.SIGSTOP)
    taken = cluster.wait_holder(b, above=epoch_a)
    cluster.wait_claimed(taken.epoch)
    cluster.wait_rows_beyond(cluster.rows())
    claimed_at = min(c.version for c in commit_history(cluster.uri) if c.epoch == taken.epoch)

    a.signal(signal.SIGCONT)  # wakes up with a full buffer and an open commit loop
    cluster.wait(lambda: "lease lost" in a.text(), "node-a to notice that it lost the lease")
    cluster.wait_rows_beyond(cluster.rows())
    finish(cluster, workload, a, b)

    late = [
        c for c in commit_history(cluster.uri) if c.version > claimed_at and c.epoch < taken.epoch
    ]
    assert late == [], f"the old holder committed after the takeover: {late}"


def test_zookeeper_restart_while_streaming_stops_writes_and_loses_nothing(
    make_cluster: MakeCluster,
    mariadb: MariaDBDatabase,
    zk_hosts: str,
    zookeeper_server: ZooKeeperServer,
) -> None:
    cluster = make_cluster(fast_zookeeper_lease(zk_hosts))
    workload = Workload(mariadb.server, mariadb.name, seed=24)
    a, b, _epoch_a = start_active_and_standby(cluster, workload)
    suspended_lines = a.text().count("connection suspended")
    holding_lines = a.text().count("holding commits")

    zookeeper_server.stop()
    try:
        cluster.wait(
            lambda: a.text().count("connection suspended") > suspended_lines,
            "node-a to see the ZooKeeper connection suspended",
        )
        # A commit that passed the gate just before the suspension may still land: wait until
        # the table is quiet for 0.5 s, then until the holder, with the workload going on, has
        # a batch to commit and says it holds it at the gate.
        seen: list[int] = []

        def quiet() -> bool:
            checkpoint = cluster.checkpoint()
            seen.append(checkpoint.version if checkpoint is not None else -1)
            return len(seen) > 10 and len(set(seen[-10:])) == 1

        cluster.wait(quiet, "the in-flight commit to settle (commits must stop)", timeout=20)
        cluster.wait(
            lambda: a.text().count("holding commits") > holding_lines,
            "node-a to hold a commit at the gate while ZooKeeper is unreachable",
        )
        after = cluster.checkpoint()
        assert after is not None
        assert after.version == seen[-1], "committed while ZooKeeper was unreachable"
    finally:
        zookeeper_server.start()
    cluster.wait_rows_beyond(cluster.rows())
    finish(cluster, workload, a, b)


LONG_SESSION = 30.0
"""A ZooKeeper session long enough that a takeover within it did not wait for its expiry."""


class LeaseNodes:
    """Reads the destination's running and member nodes, as the nodes' ZooKeeper holds them."""

    def __init__(self, hosts: str, destination: str) -> None:
        self.client = KazooClient(hosts=hosts, timeout=5.0)
        self.client.start(timeout=10)
        self.base = f"/cdc/destinations/{destination}"

    def running(self) -> RunningData:
        raw, _stat = self.client.get(f"{self.base}/running")
        data = RunningData.parse(raw)
        assert data is not None
        return data

    def member_alive(self, address: str) -> bool:
        """True while ``address``'s member node, so its ZooKeeper session, exists."""
        return self.client.exists(f"{self.base}/cluster/{address}") is not None

    def close(self) -> None:
        self.client.stop()
        self.client.close()


@pytest.fixture
def lease_nodes(zk_hosts: str) -> Iterator[LeaseNodes]:
    nodes = LeaseNodes(zk_hosts, "ha")
    yield nodes
    nodes.close()


def keep_streaming(cluster: Cluster, workload: Workload) -> None:
    """The takeover may be over before the workload did much: let the new holder stream on."""
    cluster.wait(lambda: workload.stats.committed > 2 * RATE, "more of the workload")
    cluster.wait_rows_beyond(cluster.rows())


def start_probed_pair(
    make_cluster: MakeCluster, workload: Workload, zk_hosts: str
) -> tuple[Cluster, Node, Node, int]:
    """node-a active with a 30 s session, node-b standing by and probing a's listener."""
    cluster = make_cluster(fast_zookeeper_lease(zk_hosts, session_timeout=LONG_SESSION))
    a, b, epoch_a = start_active_and_standby(cluster, workload)
    cluster.wait(
        lambda: "probing the holder's liveness listener" in b.text(),
        "node-b to probe node-a's liveness listener",
    )
    return cluster, a, b, epoch_a


def test_kill_nine_is_taken_over_through_the_liveness_listener_before_the_session_expires(
    make_cluster: MakeCluster, mariadb: MariaDBDatabase, zk_hosts: str, lease_nodes: LeaseNodes
) -> None:
    workload = Workload(mariadb.server, mariadb.name, seed=25)
    cluster, a, b, epoch_a = start_probed_pair(make_cluster, workload, zk_hosts)
    a.kill()
    taken = cluster.wait_holder(b, above=epoch_a, timeout=LONG_SESSION)
    # checked as soon as node-b holds the lease: under load its first commit can take long
    # enough for node-a's session to expire meanwhile, which says nothing about the takeover
    assert lease_nodes.member_alive("node-a"), (
        "node-a's session had not expired yet: the takeover did not wait for it"
    )
    assert "liveness listener closed" in b.text()
    cluster.wait_claimed(taken.epoch, timeout=LONG_SESSION)
    keep_streaming(cluster, workload)
    finish(cluster, workload, b)
    assert {c.epoch for c in commit_history(cluster.uri)} >= {epoch_a, taken.epoch}


def test_a_false_death_signal_switches_cleanly_and_the_epoch_fences_the_old_holder(
    make_cluster: MakeCluster, mariadb: MariaDBDatabase, zk_hosts: str, lease_nodes: LeaseNodes
) -> None:
    """node-a's listener and its connections are shut inside the live process: node-b takes
    over as if a had died; a, alive and streaming, learns it lost and commits nothing after."""
    workload = Workload(mariadb.server, mariadb.name, seed=26)
    cluster, a, b, epoch_a = start_probed_pair(make_cluster, workload, zk_hosts)
    listener = lease_nodes.running().liveness
    assert listener is not None, "node-a publishes its liveness listener"
    port = int(listener.rpartition(":")[2])
    assert a.shut_sockets(port) >= 2, "the listener and node-b's connection"
    found: list[int] = []

    def new_term() -> bool:
        holder = cluster.holder()
        if holder is not None and holder.epoch > epoch_a:
            found.append(holder.epoch)
            return True
        return False

    cluster.wait(new_term, f"a holder above epoch {epoch_a}", timeout=LONG_SESSION)
    cluster.wait_claimed(found[-1], timeout=LONG_SESSION)
    claimed_at = min(c.version for c in commit_history(cluster.uri) if c.epoch == found[-1])
    cluster.wait(lambda: "lease lost" in a.text(), "node-a to notice that it lost the lease")
    assert a.alive, "a wrong death signal never kills the holder"
    assert lease_nodes.member_alive("node-a"), "node-a's session lives on"
    keep_streaming(cluster, workload)
    finish(cluster, workload, a, b)
    late = [
        c for c in commit_history(cluster.uri) if c.version > claimed_at and c.epoch < found[-1]
    ]
    assert late == [], f"the old holder committed after the takeover: {late}"


@pytest.mark.parametrize("backend", ["sqlite", "mariadb"])
def test_kill_nine_with_a_database_lease_is_taken_over_before_the_row_expires(
    backend: str,
    make_cluster: MakeCluster,
    mariadb: MariaDBDatabase,
    request: pytest.FixtureRequest,
    tmp_path: Path,
) -> None:
    """The holder's listener is in the node registry: node-b expires a's row when a dies."""
    url = (
        f"sqlite:///{tmp_path}/shared/lease.db"
        if backend == "sqlite"
        else request.getfixturevalue("mariadb_lease_url")
    )
    cluster = make_cluster(fast_database_lease(url, expiry=LONG_SESSION))
    workload = Workload(mariadb.server, mariadb.name, seed=27)
    a, b, epoch_a = start_active_and_standby(cluster, workload)
    cluster.wait(
        lambda: "probing the holder's liveness listener" in b.text(),
        "node-b to probe node-a's liveness listener",
    )
    killed_at = time.time()
    a.kill()
    taken = cluster.wait_holder(b, above=epoch_a, timeout=LONG_SESSION)
    cluster.wait_claimed(taken.epoch, timeout=LONG_SESSION)
    assert taken.since is not None
    assert taken.since < killed_at + LONG_SESSION - 1, (
        "node-b held the lease before node-a's row could have expired"
    )
    assert "liveness listener closed" in b.text()
    keep_streaming(cluster, workload)
    finish(cluster, workload, b)
