"""ZooKeeper client settings: a lease without ACLs on a reachable host is said loudly; reads
wait a bounded time."""

from __future__ import annotations

import logging
import socket
import time

import pytest
from pydantic import SecretStr

from cdc_platform.ha import ZooKeeperLease
from cdc_platform.infra.zookeeper import BoundedReadHandler, client_handler, remote_hosts

pytestmark = pytest.mark.unit


def test_remote_hosts_leave_out_loopback() -> None:
    assert remote_hosts("127.0.0.1:2181,localhost:2182,[::1]:2183/cdc") == []
    assert remote_hosts("zk1:2181,127.0.0.1:2181,10.0.0.7:2181/chroot") == ["zk1", "10.0.0.7"]
    assert remote_hosts("[2001:db8::1]:2181") == ["2001:db8::1"]


def test_a_lease_without_acls_on_a_reachable_host_warns(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        ZooKeeperLease("127.0.0.1:2181", "shop")
        assert "WITHOUT ACLs" not in caplog.text
        ZooKeeperLease("zk1.prod:2181,zk2.prod:2181", "shop", auth=SecretStr("cdc:pw"))
        assert "WITHOUT ACLs" not in caplog.text
        ZooKeeperLease("zk1.prod:2181,127.0.0.1:2181", "shop")
    warnings = [r.getMessage() for r in caplog.records if "WITHOUT ACLs" in r.getMessage()]
    assert len(warnings) == 1
    assert "zk1.prod" in warnings[0]
    assert "lease.auth_env" in warnings[0]


def test_a_read_of_the_socket_alone_waits_at_most_the_bound() -> None:
    """kazoo waits for a connect answer for a whole session; the handler cuts that wait (and
    only waits on one socket: kazoo's main loop also watches its wake-up pipe)."""
    handler = client_handler(30.0)
    assert handler.bound == 10.0
    assert client_handler(1.5).bound == 1.0
    short = BoundedReadHandler(0.05)
    left, right = socket.socketpair()
    try:
        started = time.monotonic()
        assert short.select([left], [], [], 30.0)[0] == []
        assert time.monotonic() - started < 10.0, "the 30 s wait was not cut"
        right.sendall(b"x")
        assert short.select([left, right], [], [], 30.0)[0] == [left]
    finally:
        left.close()
        right.close()
