"""kazoo's TLS options from ``lease.tls``, checked before kazoo would retry a bad file
forever; what a refused handshake means; and the warnings for what travels unprotected."""

from __future__ import annotations

import ssl
from typing import Any

from pydantic import SecretStr

from cdc_platform.config.zookeeper_tls import ZooKeeperTlsConfig
from cdc_platform.errors import ConfigError
from cdc_platform.infra.zookeeper import TlsRefusal, remote_hosts

__all__ = ["refusal_message", "security_warnings", "tls_options"]

_HOSTNAME_MISMATCH = 62
_EXPIRED = 10
_NOT_SIGNED = frozenset({18, 19, 20, 21})
"""OpenSSL's X509_V_ERR codes: self-signed (in the chain), no local issuer, no signature."""


def tls_options(tls: ZooKeeperTlsConfig | None) -> dict[str, Any]:
    """kazoo client options for ``lease.tls`` (none without it), its files loaded once here
    as kazoo loads them: kazoo's connect loop would take a bad file for an outage and retry
    it forever without saying which file.

    Raises:
        ConfigError: naming the ``lease.tls`` key, the file and what is wrong with it.
    """
    if tls is None:
        return {}
    password = tls.key_password()
    secret = password.get_secret_value() if password is not None else None
    _check_files(tls, secret)
    return {
        "use_ssl": True,
        "verify_certs": True,
        "check_hostname": tls.check_hostname,
        "ca": tls.ca_file,
        "certfile": tls.cert_file,
        "keyfile": tls.key_file,
        "keyfile_password": secret,
    }


def _check_files(tls: ZooKeeperTlsConfig, password: str | None) -> None:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    for key, path in (("ca_file", tls.ca_file), ("cert_file", tls.cert_file)):
        if path is not None:
            _readable(key, path)
    if tls.key_file is not None:
        _readable("key_file", tls.key_file)
    if tls.ca_file is not None:
        try:
            context.load_verify_locations(tls.ca_file)
        except ssl.SSLError as exc:
            raise ConfigError(
                f"lease.tls.ca_file {tls.ca_file}: not a PEM file of CA certificates "
                f"({exc.reason or exc})"
            ) from None
    if tls.cert_file is not None and tls.key_file is not None:
        try:
            context.load_cert_chain(tls.cert_file, tls.key_file, password)
        except ssl.SSLError as exc:
            hint = (
                "; is lease.tls.key_password_env the key's password?"
                if tls.key_password_env
                else "; an encrypted key needs lease.tls.key_password_env"
            )
            raise ConfigError(
                f"lease.tls.cert_file {tls.cert_file} and lease.tls.key_file {tls.key_file}: "
                "not a PEM client certificate and its private key "
                f"({exc.reason or exc}){hint}"
            ) from None


def _readable(key: str, path: str) -> None:
    try:
        with open(path, "rb") as file:
            file.read(1)
    except OSError as exc:
        raise ConfigError(f"lease.tls.{key} {path}: cannot be read ({exc.strerror})") from None


def refusal_message(refusal: TlsRefusal | None, tls: ZooKeeperTlsConfig | None) -> str | None:
    """What an operator can act on when TLS to a server failed; None without a refusal."""
    if refusal is None or tls is None:
        return None
    error, server = refusal.error, f"{refusal.host}:{refusal.port}"
    if isinstance(error, ssl.SSLCertVerificationError):
        detail = error.verify_message or str(error)
        if error.verify_code == _HOSTNAME_MISMATCH:
            return (
                f"the certificate of the ZooKeeper server at {server} does not name "
                f"'{refusal.host}' ({detail}): name the server in lease.hosts as its "
                "certificate does, or set lease.tls.check_hostname: false"
            )
        if error.verify_code == _EXPIRED:
            return f"the certificate of the ZooKeeper server at {server} has expired ({detail})"
        if error.verify_code in _NOT_SIGNED:
            signer = (
                f"lease.tls.ca_file ({tls.ca_file})"
                if tls.ca_file is not None
                else "any of this system's CAs (lease.tls.ca_file is not set)"
            )
            return (
                f"the certificate of the ZooKeeper server at {server} is not signed by "
                f"{signer} ({detail}): set lease.tls.ca_file to the CA that signs the "
                "servers' certificates"
            )
        return f"the certificate of the ZooKeeper server at {server} was refused ({detail})"
    client = (
        "does it require a client certificate (set lease.tls.cert_file and key_file)?"
        if tls.cert_file is None
        else "does its ssl.trustStore hold the CA that signed lease.tls.cert_file?"
    )
    return (
        f"the TLS handshake with the ZooKeeper server at {server} failed ({error}): is that "
        f"port its secureClientPort, and {client}"
    )


def security_warnings(
    hosts: str, auth: SecretStr | None, tls: ZooKeeperTlsConfig | None
) -> list[str]:
    """What travels unprotected to the hosts of ``hosts`` that are not this machine: the
    lease itself without ACLs; the digest credentials and the nodes without TLS."""
    remote = remote_hosts(hosts)
    if not remote:
        return []
    reachable = ", ".join(remote)
    if auth is None:
        return [
            f"ZooKeeper at {hosts} is used WITHOUT ACLs (no lease.auth_env): anyone who can "
            f"reach {reachable} can delete or fake this destination's lease and epoch; set "
            "lease.auth_env to a variable holding 'user:password' (docs/ha.md)"
        ]
    if tls is None:
        return [
            f"SECURITY: ZooKeeper at {hosts} is reached in plain text (no lease.tls): the "
            "digest credentials of lease.auth_env and the lease nodes travel readable to "
            f"anyone on the network path to {reachable}; set lease.tls and point lease.hosts "
            "at the servers' secureClientPort (docs/ha.md)"
        ]
    return []
