"""ZooKeeper client settings: a lease without ACLs on a reachable host is said loudly; reads
wait a bounded time."""

from __future__ import annotations

import logging

import pytest
from kazoo.handlers.threading import SequentialThreadingHandler

from cdc_platform.config.leases import ZooKeeperLeaseConfig
from cdc_platform.ha import ZooKeeperLease
from cdc_platform.infra.zookeeper import client_handler, remote_hosts

pytestmark = pytest.mark.unit


def test_remote_hosts_leave_out_loopback() -> None:
    assert remote_hosts("127.0.0.1:2181,localhost:2182,[::1]:2183/cdc") == []
    assert remote_hosts("zk1:2181,127.0.0.1:2181,10.0.0.7:2181/chroot") == ["zk1", "10.0.0.7"]
    assert remote_hosts("[2001:db8::1]:2181") == ["2001:db8::1"]


def _lease(hosts: str, **values: object) -> ZooKeeperLease:
    settings = {"backend": "zookeeper", "hosts": hosts, **values}
    return ZooKeeperLease(ZooKeeperLeaseConfig.model_validate(settings), "shop")


def test_a_lease_without_acls_on_a_reachable_host_warns(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CDC_TEST_ZK_AUTH", "cdc:pw")
    with caplog.at_level(logging.WARNING):
        _lease("127.0.0.1:2181")
        assert "WITHOUT ACLs" not in caplog.text
        _lease("zk1.prod:2181,zk2.prod:2181", auth_env="CDC_TEST_ZK_AUTH")
        assert "WITHOUT ACLs" not in caplog.text
        _lease("zk1.prod:2181,127.0.0.1:2181")
    warnings = [r.getMessage() for r in caplog.records if "WITHOUT ACLs" in r.getMessage()]
    assert len(warnings) == 1
    assert "zk1.prod" in warnings[0]
    assert "lease.auth_env" in warnings[0]


def test_a_read_of_the_socket_alone_waits_at_most_the_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """kazoo waits for a connect answer for a whole session; the handler cuts a wait on its
    socket alone and leaves kazoo's main loop (the socket and its wake-up pipe) and writes as
    they are. What the handler passes on to kazoo's own select is recorded."""
    passed: list[float | None] = []

    def record(
        self: object, rlist: object, wlist: object, xlist: object, timeout: float | None
    ) -> tuple[list[object], list[object], list[object]]:
        passed.append(timeout)
        return [], [], []

    monkeypatch.setattr(SequentialThreadingHandler, "select", record)
    assert client_handler(30.0).bound == 10.0
    assert client_handler(1.5).bound == 1.0
    handler = client_handler(30.0)
    handler.select(["socket"], [], [], 30.0)  # the connect answer: cut
    handler.select(["socket"], [], [], None)  # no timeout at all: cut
    handler.select(["socket"], [], [], 4.0)  # already shorter: kept
    handler.select(["socket", "wake-up pipe"], [], [], 20.0)  # the main loop: kept
    handler.select([], ["socket"], [], 30.0)  # a write: kept
    assert passed == [10.0, 10.0, 4.0, 20.0, 30.0]
