"""A ZooKeeper lease without ACLs on a host other machines can reach is said loudly."""

from __future__ import annotations

import logging

import pytest
from pydantic import SecretStr

from cdc_platform.ha import ZooKeeperLease
from cdc_platform.infra.zookeeper import remote_hosts

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
