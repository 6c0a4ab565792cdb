"""source.tls settings and the warning for a remote source whose certificate is not checked."""

from __future__ import annotations

import logging
import ssl
from types import SimpleNamespace
from typing import Any, cast

import pymysql
import pytest
from pydantic import ValidationError

from cdc_platform.config.source import SourceConfig
from cdc_platform.config.tls import TlsConfig, is_loopback
from cdc_platform.infra.mysql_tls import named_refusal
from cdc_platform.source import mysql, mysql_errors

pytestmark = pytest.mark.unit


def _source(host: str, **tls: str) -> SourceConfig:
    return SourceConfig(host=host, user="cdc", password_env="PW", server_id=7, tls=TlsConfig(**tls))


@pytest.mark.parametrize(
    ("host", "mode", "warned"),
    [
        ("db.example.com", "preferred", True),
        ("10.0.0.5", "required", True),
        ("db.example.com", "disabled", True),
        ("db.example.com", "verify_ca", False),
        ("db.example.com", "verify_identity", False),
        ("127.0.0.1", "preferred", False),
        ("localhost", "disabled", False),
        ("::1", "required", False),
    ],
)
def test_a_remote_source_without_verification_is_warned_about_once(
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    host: str,
    mode: str,
    warned: bool,
) -> None:
    monkeypatch.setattr(mysql, "_warned", set())
    config = _source(host, mode=mode)
    with caplog.at_level(logging.WARNING, logger="cdc_platform.source.mysql"):
        mysql.warn_unverified(config)
        mysql.warn_unverified(config)
    security = [r for r in caplog.records if "SECURITY" in r.getMessage()]
    assert len(security) == (1 if warned else 0)
    if warned:
        assert host in security[0].getMessage()
        assert "verify_identity" in security[0].getMessage()


def test_modes_map_to_the_driver() -> None:
    assert TlsConfig(mode="disabled").pymysql_args() == {"ssl_disabled": True}
    assert TlsConfig().pymysql_args() == {}  # pymysql prefers TLS by itself
    required = TlsConfig(mode="required").pymysql_args()["ssl"]
    assert required.verify_mode == ssl.CERT_NONE
    assert not required.check_hostname
    verify_ca = TlsConfig(mode="verify_ca").pymysql_args()["ssl"]
    assert verify_ca.verify_mode == ssl.CERT_REQUIRED
    assert not verify_ca.check_hostname
    identity = TlsConfig(mode="verify_identity").pymysql_args()["ssl"]
    assert identity.verify_mode == ssl.CERT_REQUIRED
    assert identity.check_hostname


def test_files_that_a_mode_would_ignore_are_refused() -> None:
    with pytest.raises(ValidationError, match="use mode required, verify_ca or verify_identity"):
        TlsConfig(mode="preferred", ca_file="/ca.pem")
    with pytest.raises(ValidationError, match="cert_file and key_file go together"):
        TlsConfig(mode="verify_ca", cert_file="/c.pem")
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        TlsConfig.model_validate({"mode": "required", "verify": True})


def test_a_ca_file_with_mode_required_is_refused_naming_verify_ca() -> None:
    """required checks no certificate: a ca_file there would only make the operator believe
    the server is verified (issue 42.13)."""
    with pytest.raises(ValidationError, match=r"ca_file set with mode required.*verify_ca"):
        TlsConfig(mode="required", ca_file="/ca.pem")
    # A client certificate is presented whatever the mode checks of the server's: allowed.
    client = TlsConfig(mode="required", cert_file="/c.pem", key_file="/k.pem")
    assert client.cert_file == "/c.pem"


def test_loopback_hosts() -> None:
    assert is_loopback("127.0.0.1")
    assert is_loopback("127.1.2.3")
    assert is_loopback("[::1]")
    assert is_loopback("LOCALHOST")
    assert not is_loopback("10.0.0.1")
    assert not is_loopback("db.internal")


def _refused(code: int, message: str) -> pymysql.err.OperationalError:
    """pymysql's error 2003 around the handshake's verification error, as connect raises it."""
    cause = ssl.SSLCertVerificationError(1, f"certificate verify failed: {message}")
    cause.verify_code, cause.verify_message = code, message
    exc = pymysql.err.OperationalError(2003, f"Can't connect to MySQL server ({cause})")
    exc.original_exception = cause
    return exc


@pytest.mark.parametrize(
    ("code", "message", "cause"),
    [
        (10, "certificate has expired", "has expired: renew it"),
        (9, "certificate is not yet valid", "not valid yet: check the clocks"),
        (26, "unsuitable certificate purpose", "was refused (OpenSSL: unsuitable certificate"),
    ],
)
def test_a_refused_certificate_is_named_as_error_2026(code: int, message: str, cause: str) -> None:
    """The CA and host name causes are shown against a real server (test_source_tls)."""
    conn = cast("pymysql.connections.Connection[Any]", SimpleNamespace(host="db", ctx=None))
    named = named_refusal(_refused(code, message), conn)
    assert named is not None
    assert named.args[0] == 2026
    assert cause in named.args[1]
    assert mysql_errors.classify(named) is mysql_errors.Failure.TLS
    refused = pymysql.err.OperationalError(2003, "Can't connect to MySQL server (timed out)")
    assert named_refusal(refused, conn) is None
