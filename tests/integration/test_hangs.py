"""Liveness bounds: no stop path, repair or side read waits forever on an unreachable server.

Real ZooKeeper (a private server per test, so it can be frozen or killed), real MariaDB, real
Delta tables. The waits here are generous liveness limits (the process must end at all), not
timing assertions.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from cdc_platform.testing.ha import Cluster, fast_zookeeper_lease
from cdc_platform.testing.workload import Workload
from cdc_platform.testing.zookeeper import ZooKeeperServer
from tests.conftest import MariaDBDatabase

pytestmark = pytest.mark.integration

SESSION = 2.0
"""The lease's session timeout in these tests (fast_zookeeper_lease)."""
EXIT_LIMIT = 10 * SESSION
"""How long a SIGTERM'd run may take to exit with its ZooKeeper gone: a liveness limit."""


@pytest.fixture
def private_zookeeper(tmp_path: Path) -> Iterator[ZooKeeperServer]:
    server = ZooKeeperServer(tmp_path / "zookeeper")
    server.data_dir.parent.mkdir(parents=True, exist_ok=True)
    server.start()
    try:
        yield server
    finally:
        server.resume()
        server.stop()


@pytest.mark.parametrize("outage", ["frozen", "killed"])
def test_sigterm_exits_while_zookeeper_is_unreachable(
    outage: str,
    mariadb: MariaDBDatabase,
    private_zookeeper: ZooKeeperServer,
    tmp_path: Path,
) -> None:
    cluster = Cluster(
        tmp_path,
        mariadb.server,
        mariadb.user,
        mariadb.name,
        fast_zookeeper_lease(private_zookeeper.hosts),
    )
    try:
        Workload(mariadb.server, mariadb.name, seed=3).create_schema()
        node = cluster.start("node-a")
        held = cluster.wait_holder(node)
        cluster.wait_claimed(held.epoch)
        if outage == "frozen":
            private_zookeeper.pause()
        else:
            private_zookeeper.kill()
        cluster.wait(
            lambda: "connection suspended" in node.text(), "node-a to see ZooKeeper go away"
        )
        node.signal(signal.SIGTERM)
        try:
            code = node.proc.wait(timeout=EXIT_LIMIT)
        except Exception:
            raise AssertionError(
                f"the run did not exit within {EXIT_LIMIT:g} s of SIGTERM with ZooKeeper "
                f"{outage}:\n{cluster.logs(60)}"
            ) from None
        assert code == 0, cluster.logs()
        text = node.text()
        assert "could not" in text, f"what was not cleaned up must be logged:\n{text}"
    finally:
        cluster.close()
