"""TLS to a MySQL/MariaDB server: the source (side reads and the binlog stream alike) and a
MySQL lease database.

The modes are MySQL's own ``--ssl-mode`` values, so an operator reads them as in any MySQL
client. Only ``verify_ca`` and ``verify_identity`` stop a man in the middle; ``preferred``
(the default, as in MySQL's clients) encrypts when the server offers TLS and falls back to
plain text when it does not, and ``required`` refuses plain text but trusts any certificate.
"""

from __future__ import annotations

import functools
import ipaddress
import ssl
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, model_validator

__all__ = ["TlsConfig", "is_loopback"]

TlsMode = Literal["disabled", "preferred", "required", "verify_ca", "verify_identity"]


class TlsConfig(BaseModel):
    """``tls:`` of a MySQL/MariaDB connection."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    mode: TlsMode = "preferred"
    """disabled: plain text; preferred: TLS when the server offers it; required: TLS or no
    connection, certificate not checked; verify_ca: the certificate must be signed by
    ``ca_file`` (or a system CA); verify_identity: and name the host connected to."""
    ca_file: str | None = None
    """PEM file of the CA(s) that sign the server's certificate (default: the system's);
    verify_ca and verify_identity only (required checks no certificate)."""
    cert_file: str | None = None
    """PEM client certificate, for servers that require one (``REQUIRE X509``)."""
    key_file: str | None = None
    """PEM private key of ``cert_file``."""

    @model_validator(mode="after")
    def _files_fit_the_mode(self) -> TlsConfig:
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("cert_file and key_file go together: set both or neither")
        files = [f for f in ("ca_file", "cert_file") if getattr(self, f) is not None]
        if files and self.mode in ("disabled", "preferred"):
            raise ValueError(
                f"{' and '.join(files)} set with mode {self.mode}, which would ignore them "
                "or fall back to plain text: use mode required, verify_ca or verify_identity"
            )
        if self.ca_file is not None and self.mode == "required":
            raise ValueError(
                "ca_file set with mode required, which checks no certificate: use mode "
                "verify_ca (signed by ca_file) or verify_identity (and naming the host)"
            )
        return self

    @property
    def verifies(self) -> bool:
        """Whether the server's certificate is checked (a man in the middle is refused)."""
        return self.mode in ("verify_ca", "verify_identity")

    def context(self) -> ssl.SSLContext | None:
        """The client context for modes that insist on TLS (None: disabled, preferred).

        Raises:
            OSError: a certificate or key file cannot be read.
            ssl.SSLError: a file is not a PEM certificate or key.
        """
        if self.mode in ("disabled", "preferred"):
            return None
        return _context(self.mode, self.ca_file, self.cert_file, self.key_file)

    def pymysql_args(self) -> dict[str, Any]:
        """pymysql's connection arguments for this mode (pymysql itself prefers TLS)."""
        if self.mode == "disabled":
            return {"ssl_disabled": True}
        context = self.context()
        return {} if context is None else {"ssl": context}


@functools.lru_cache(maxsize=16)
def _context(
    mode: TlsMode, ca_file: str | None, cert_file: str | None, key_file: str | None
) -> ssl.SSLContext:
    """One context per setting and process: loading CA files costs tens of ms, and every
    side read opens a connection (a renewed certificate needs a restart)."""
    context = ssl.create_default_context(cafile=ca_file)
    context.check_hostname = mode == "verify_identity"
    if mode == "required":
        context.verify_mode = ssl.CERT_NONE
    if cert_file is not None:
        context.load_cert_chain(cert_file, key_file)
    return context


def is_loopback(host: str) -> bool:
    """Whether ``host`` is this machine (traffic that never leaves it needs no verification)."""
    if host.lower() in ("localhost", "localhost.localdomain"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
