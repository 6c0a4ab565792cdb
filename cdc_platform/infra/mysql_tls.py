"""Why a MySQL/MariaDB server's TLS certificate was refused, in words an operator can act on.

pymysql wraps the handshake's ``SSLCertVerificationError`` into error 2003 "Can't connect to
MySQL server", which reads as a network fault, and OpenSSL's own words ("self-signed
certificate in certificate chain", "Hostname mismatch") name neither the CA the client
trusts nor the names the certificate has. :func:`named_refusal` turns that error, once, where
pymysql is called, into error 2026 (CR_SSL_CONNECTION_ERROR, the MySQL client's number for a
TLS failure) naming the cause: not signed by the CA in ``ca_file`` (named), or the names the
certificate has and the host connected to.
"""

from __future__ import annotations

import contextlib
import re
import ssl
from typing import Any

import pymysql

__all__ = ["SSL_CONNECTION_ERROR", "is_tls_failure", "named_refusal"]

SSL_CONNECTION_ERROR = 2026
"""CR_SSL_CONNECTION_ERROR: a TLS failure (refused certificate, or no TLS where required)."""
_CANNOT_CONNECT = 2003
_TLS_TEXT = re.compile(r"\[SSL|CERTIFICATE_VERIFY_FAILED|certificate verify failed|SSLError", re.I)

_NAME_MISMATCH = frozenset({62, 64})
"""X509_V_ERR_HOSTNAME_MISMATCH, X509_V_ERR_IP_ADDRESS_MISMATCH."""
_UNKNOWN_ISSUER = frozenset({2, 18, 19, 20, 21})
"""OpenSSL's ways of saying no trusted CA signed the chain: issuer unknown (locally), a
self-signed leaf or chain, a leaf whose signature cannot be checked."""
_NOT_YET_VALID, _EXPIRED = 9, 10


def is_tls_failure(exc: BaseException) -> bool:
    """A TLS handshake the client refused (certificate not trusted, wrong host name), or a
    server without TLS where TLS is required: the same settings fail again."""
    code = exc.args[0] if exc.args and isinstance(exc.args[0], int) else None
    if isinstance(exc, ssl.SSLError | ssl.CertificateError) or code == SSL_CONNECTION_ERROR:
        return True
    # pymysql wraps any other OSError of the handshake (a protocol failure) into error 2003.
    return code == _CANNOT_CONNECT and _TLS_TEXT.search(str(exc)) is not None


def named_refusal(
    exc: BaseException, conn: pymysql.connections.Connection[Any]
) -> pymysql.err.OperationalError | None:
    """Error 2026 naming why ``conn``'s server certificate was refused (None: ``exc`` is
    not a refused certificate). ``conn`` is the connection whose ``connect`` raised it."""
    cause = getattr(exc, "original_exception", exc)
    if not isinstance(cause, ssl.SSLCertVerificationError):
        return None
    context: ssl.SSLContext | None = getattr(conn, "ctx", None)
    code = cause.verify_code
    if code in _NAME_MISMATCH and context is not None:
        names = _certificate_names(conn, context)
        named = ", ".join(names) if names else "other names"
        text = (
            f"the server's certificate names {named}, not {conn.host!r} (the host connected "
            "to): connect by a name the certificate has, or give the server a certificate "
            f"for {conn.host}"
        )
    elif code in _UNKNOWN_ISSUER and context is not None:
        text = (
            f"the server's certificate is not signed by {_trusted(context)}: set ca_file "
            "to the CA that signed it (or have the server use a certificate that CA signed)"
        )
    elif code == _EXPIRED:
        text = "the server's certificate has expired: renew it on the server"
    elif code == _NOT_YET_VALID:
        text = "the server's certificate is not valid yet: check the clocks of both machines"
    else:
        text = "the server's certificate was refused"
    return pymysql.err.OperationalError(
        SSL_CONNECTION_ERROR, f"{text} (OpenSSL: {cause.verify_message})"
    )


def _trusted(context: ssl.SSLContext) -> str:
    """The CAs the refusing context trusts, by name (a ca_file holds one or a few)."""
    names = [_common_name(ca.get("subject", ())) for ca in context.get_ca_certs()]
    if not names or len(names) > 3:
        return "a CA this client trusts (ca_file, or the system's CAs without it)"
    return "the CA in ca_file (" + ", ".join(repr(n) for n in names) + ")"


def _common_name(subject: Any) -> str:
    """The commonName of a certificate's subject as ``getpeercert`` gives it."""
    for rdn in subject:
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return "?"


class _Stop(Exception):  # noqa: N818 (not an error: the probe's planned end)
    """Raised by the probe right after the handshake: nothing more is sent to the server."""


class _CertificateProbe(ssl.SSLContext):
    """Checks the server's chain against the refusing context's CAs but not the host name,
    keeps the certificate, and ends the connection before pymysql sends any login."""

    peer: dict[str, Any] | None = None

    def wrap_socket(self, *args: Any, **kwargs: Any) -> ssl.SSLSocket:
        tls = super().wrap_socket(*args, **kwargs)
        self.peer = dict(tls.getpeercert() or {})
        tls.close()
        raise _Stop


def _certificate_names(
    conn: pymysql.connections.Connection[Any], trusted: ssl.SSLContext
) -> list[str]:
    """The names (subjectAltName, else commonName) of the certificate ``conn``'s server
    shows, read by a second handshake that sends no login (empty if that fails too)."""
    probe = _CertificateProbe(ssl.PROTOCOL_TLS_CLIENT)
    probe.check_hostname = False
    cas = [bytes(ca) for ca in trusted.get_ca_certs(binary_form=True)]
    if cas:
        probe.load_verify_locations(cadata=b"".join(cas))
    else:
        probe.load_default_certs()
    timeout = conn.connect_timeout or 10.0
    with contextlib.suppress(_Stop, pymysql.MySQLError, OSError, ValueError):
        pymysql.connections.Connection(
            host=conn.host,
            port=conn.port,
            user="",
            password="",
            ssl=probe,
            connect_timeout=timeout,
            read_timeout=timeout,
        )
    peer = probe.peer or {}
    names = [str(value) for _, value in peer.get("subjectAltName", ())]
    if not names and peer.get("subject"):
        names = [_common_name(peer["subject"])]
    return names
