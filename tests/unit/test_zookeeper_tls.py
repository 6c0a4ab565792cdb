"""ZooKeeper's TLS client port: digest credentials sent in plain text to another machine are
said loudly, and the TLS settings are checked before kazoo would retry a bad file forever."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from pydantic import SecretStr, ValidationError

from cdc_platform.config.leases import ZooKeeperLeaseConfig
from cdc_platform.config.zookeeper_tls import ZooKeeperTlsConfig
from cdc_platform.errors import ConfigError
from cdc_platform.ha import ZooKeeperLease
from cdc_platform.infra.zookeeper_tls import security_warnings, tls_options
from cdc_platform.testing.tls import Certificates, make_certificates

pytestmark = pytest.mark.unit

AUTH = SecretStr("cdc:pw")
AUTH_ENV = "CDC_TEST_ZK_AUTH"


@pytest.fixture(autouse=True)
def _auth_in_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(AUTH_ENV, AUTH.get_secret_value())


def _lease(hosts: str, **values: object) -> ZooKeeperLease:
    """A lease on ``hosts`` (never connected here: only its construction is tested)."""
    settings = {"backend": "zookeeper", "hosts": hosts, **values}
    return ZooKeeperLease(ZooKeeperLeaseConfig.model_validate(settings), "shop")


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return make_certificates(tmp_path_factory.mktemp("zk-tls"))


def _clear_text(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "plain text" in r.getMessage()]


def test_digest_auth_in_plain_text_to_a_remote_host_warns(
    caplog: pytest.LogCaptureFixture, certs: Certificates
) -> None:
    with caplog.at_level(logging.WARNING, logger="cdc_platform"):
        _lease("zk1.prod:2281,127.0.0.1:2181/chroot", auth_env=AUTH_ENV)
    warnings = _clear_text(caplog)
    assert len(warnings) == 1, caplog.text
    assert "zk1.prod" in warnings[0]
    assert "127.0.0.1" not in warnings[0].split("travel")[-1]
    assert "lease.tls" in warnings[0]
    assert "lease.auth_env" in warnings[0]
    assert AUTH.get_secret_value() not in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="cdc_platform"):
        _lease("127.0.0.1:2181,localhost:2182", auth_env=AUTH_ENV)  # loopback only
        tls = ZooKeeperTlsConfig(ca_file=str(certs.ca_file))
        _lease("zk1.prod:2281", auth_env=AUTH_ENV, tls=tls)  # over TLS
    assert _clear_text(caplog) == []


def test_the_warnings_are_one_per_concern() -> None:
    tls = ZooKeeperTlsConfig()
    assert security_warnings("127.0.0.1:2181", AUTH, None) == []
    assert security_warnings("zk1:2281", AUTH, tls) == []
    (no_acl,) = security_warnings("zk1:2181", None, None)
    assert "WITHOUT ACLs" in no_acl
    (no_acl_tls,) = security_warnings("zk1:2281", None, tls)
    assert "WITHOUT ACLs" in no_acl_tls
    (clear,) = security_warnings("zk1:2181", AUTH, None)
    assert "plain text" in clear


def _lease_config(tls: dict[str, object]) -> ZooKeeperLeaseConfig:
    return ZooKeeperLeaseConfig.model_validate(
        {"backend": "zookeeper", "hosts": "zk1:2281", "tls": tls}
    )


def test_tls_settings_that_do_not_fit_together_are_refused_naming_the_key() -> None:
    with pytest.raises(ValidationError, match="cert_file and key_file"):
        _lease_config({"cert_file": "/etc/cdc/zk-client.pem"})
    with pytest.raises(ValidationError, match="key_password_env"):
        _lease_config({"key_password_env": "CDC_ZK_KEY_PASSWORD"})
    with pytest.raises(ValidationError, match="mode"):
        _lease_config({"mode": "verify_identity"})  # the MySQL modes are not ZooKeeper's


def test_a_tls_file_that_cannot_be_used_is_named_with_its_key(
    tmp_path: Path, certs: Certificates
) -> None:
    missing = tmp_path / "absent-ca.pem"
    with pytest.raises(ConfigError) as caught:
        _lease("zk1:2281", tls=ZooKeeperTlsConfig(ca_file=str(missing)))
    assert "lease.tls.ca_file" in str(caught.value)
    assert str(missing) in str(caught.value)
    garbage = tmp_path / "not-pem.pem"
    garbage.write_text("not a certificate\n")
    with pytest.raises(ConfigError, match=r"lease\.tls\.ca_file .*not-pem\.pem"):
        tls_options(ZooKeeperTlsConfig(ca_file=str(garbage)))
    other = make_certificates(tmp_path / "other")
    mismatched = ZooKeeperTlsConfig(
        ca_file=str(certs.ca_file), cert_file=str(certs.client_cert), key_file=str(other.client_key)
    )
    with pytest.raises(ConfigError) as caught:
        tls_options(mismatched)
    assert "lease.tls.cert_file" in str(caught.value)
    assert "lease.tls.key_file" in str(caught.value)
    assert str(other.client_key) in str(caught.value)


def test_the_key_password_comes_from_the_environment_only(
    tmp_path: Path, certs: Certificates, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = serialization.load_pem_private_key(certs.client_key.read_bytes(), None)
    locked = tmp_path / "client-key-locked.pem"
    locked.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"k3y-s3cret"),
        )
    )
    tls = ZooKeeperTlsConfig(
        ca_file=str(certs.ca_file),
        cert_file=str(certs.client_cert),
        key_file=str(locked),
        key_password_env="CDC_TEST_ZK_KEY_PASSWORD",
    )
    monkeypatch.delenv("CDC_TEST_ZK_KEY_PASSWORD", raising=False)
    with pytest.raises(ConfigError, match="CDC_TEST_ZK_KEY_PASSWORD"):
        tls_options(tls)
    monkeypatch.setenv("CDC_TEST_ZK_KEY_PASSWORD", "wrong")
    with pytest.raises(ConfigError, match=r"lease\.tls\.key_file"):
        tls_options(tls)
    monkeypatch.setenv("CDC_TEST_ZK_KEY_PASSWORD", "k3y-s3cret")
    options = tls_options(tls)
    assert options["use_ssl"] is True
    assert options["verify_certs"] is True
    assert options["check_hostname"] is True
    assert options["keyfile_password"] == "k3y-s3cret"
    assert options["certfile"] == str(certs.client_cert)
