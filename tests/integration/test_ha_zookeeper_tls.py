"""The ZooKeeper lease over ZooKeeper's TLS client port (``secureClientPort``, a client
certificate required) of a private server: a lease held and renewed, the state watch beside
it, and the refusals an operator must be able to act on."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.handlers.threading import KazooTimeoutError

from cdc_platform.config.leases import ZooKeeperLeaseConfig
from cdc_platform.config.platform import PlatformConfig
from cdc_platform.config.zookeeper_tls import ZooKeeperTlsConfig
from cdc_platform.coordination.factory import open_lease, open_state_store
from cdc_platform.errors import LeaseBackendError
from cdc_platform.ha import ZooKeeperLease
from cdc_platform.testing.tls import Certificates, make_certificates
from cdc_platform.testing.zookeeper import ZooKeeperServer

pytestmark = pytest.mark.integration

SESSION = 2.0


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return make_certificates(tmp_path_factory.mktemp("zk-tls-certs"))


@pytest.fixture(scope="module")
def tls_server(
    tmp_path_factory: pytest.TempPathFactory, certs: Certificates
) -> Iterator[ZooKeeperServer]:
    with ZooKeeperServer(tmp_path_factory.mktemp("zookeeper-tls"), tls=certs) as server:
        yield server


def _tls(certs: Certificates, **overrides: str) -> ZooKeeperTlsConfig:
    files = {
        "ca_file": str(certs.ca_file),
        "cert_file": str(certs.client_cert),
        "key_file": str(certs.client_key),
    }
    return ZooKeeperTlsConfig.model_validate(files | overrides)


def test_a_lease_is_held_and_renewed_over_the_tls_port(
    tls_server: ZooKeeperServer,
    certs: Certificates,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """From platform.yaml's settings to a held lease, a standby that sees its holder, and the
    state watch, all through the TLS port only; a plain-text client is not served there."""
    monkeypatch.setenv("CDC_TEST_ZK_TLS_AUTH", "cdc:tls-s3cret")
    destination = f"tls_{uuid.uuid4().hex[:8]}"
    platform = PlatformConfig.model_validate(
        {
            "lease": {
                "backend": "zookeeper",
                "hosts": tls_server.tls_hosts,
                "root": f"/{destination}",
                "session_timeout_seconds": SESSION,
                "switch_delay_seconds": 0.5,
                "auth_env": "CDC_TEST_ZK_TLS_AUTH",
                "tls": _tls(certs).model_dump(exclude_none=True),
            }
        }
    )
    conf = tmp_path / "conf"
    holder = open_lease(platform, conf, destination, address="holder")
    standby = open_lease(platform, conf, destination, address="standby")
    store = open_state_store(platform, conf)
    try:
        assert holder.acquire(timeout=30) == 0
        assert holder.renew()
        assert holder.is_held()
        seen = standby.holder()
        assert seen is not None
        assert seen.address == "holder"
        assert standby.try_acquire() is None
        assert store.put("probe", "over tls") is not None
        entry = store.get("probe")
        assert entry is not None
        assert entry.value == "over tls"
    finally:
        store.close()
        standby.close()
        holder.close()
    plain = KazooClient(hosts=tls_server.tls_hosts, timeout=SESSION)
    try:
        with pytest.raises(KazooTimeoutError):
            plain.start(timeout=SESSION)  # the port speaks TLS only
    finally:
        plain.stop()
        plain.close()


def test_a_server_certificate_of_another_ca_is_refused_naming_the_ca_file(
    tls_server: ZooKeeperServer,
    certs: Certificates,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stranger = make_certificates(tmp_path / "other", ca_name="another CA")
    monkeypatch.setenv("CDC_TEST_ZK_AUTH", "cdc:pw")
    settings = ZooKeeperLeaseConfig(
        backend="zookeeper",
        hosts=tls_server.tls_hosts,
        session_timeout_seconds=SESSION,
        auth_env="CDC_TEST_ZK_AUTH",
        tls=_tls(certs, ca_file=str(stranger.ca_file)),
    )
    lease = ZooKeeperLease(settings, f"tls_{uuid.uuid4().hex[:8]}")
    try:
        with pytest.raises(LeaseBackendError) as caught:
            lease.try_acquire()
    finally:
        lease.close()
    message = str(caught.value)
    assert "not signed by" in message, message
    assert f"lease.tls.ca_file ({stranger.ca_file})" in message
    assert tls_server.tls_hosts in message


def test_a_host_name_the_certificate_does_not_name_is_refused(
    tls_server: ZooKeeperServer, certs: Certificates
) -> None:
    """The server's certificate names 127.0.0.1 only: reached as localhost, it is refused."""
    settings = ZooKeeperLeaseConfig(
        backend="zookeeper",
        hosts=f"localhost:{tls_server.tls_port}",
        session_timeout_seconds=SESSION,
        tls=_tls(certs),
    )
    lease = ZooKeeperLease(settings, f"tls_{uuid.uuid4().hex[:8]}")
    try:
        with pytest.raises(LeaseBackendError) as caught:
            lease.try_acquire()
    finally:
        lease.close()
    message = str(caught.value)
    assert "does not name 'localhost'" in message, message
    assert "lease.tls.check_hostname" in message
