"""``lease.tls`` of a ZooKeeper lease: ZooKeeper's TLS client port (``secureClientPort``).

Without it kazoo speaks plain text, so the digest credentials of ``lease.auth_env`` (sent at
every connect) and every lease node can be read, and a session taken over, by anyone on the
network path. The server's certificate is always verified (against ``ca_file``, else the
system's CAs) and, by default, must name the host of ``lease.hosts`` it was reached by.
"""

from __future__ import annotations

from pydantic import SecretStr, model_validator

from cdc_platform.config.base import ConfigModel, read_secret

__all__ = ["ZooKeeperTlsConfig"]


class ZooKeeperTlsConfig(ConfigModel):
    """TLS to ZooKeeper's ``secureClientPort`` (its presence turns TLS on)."""

    ca_file: str | None = None
    """PEM file of the CA(s) that sign the servers' certificates (default: the system's)."""
    cert_file: str | None = None
    """PEM client certificate, for servers with ``ssl.clientAuth=need`` (their default)."""
    key_file: str | None = None
    """PEM private key of ``cert_file``."""
    key_password_env: str | None = None
    """Environment variable holding the password of an encrypted ``key_file``, if any."""
    check_hostname: bool = True
    """The server's certificate must name the host of ``lease.hosts`` it is reached by;
    false: any certificate the CA signed (a man in the middle with one is not refused)."""

    @model_validator(mode="after")
    def _files_fit_together(self) -> ZooKeeperTlsConfig:
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("cert_file and key_file go together: set both or neither")
        if self.key_password_env is not None and self.key_file is None:
            raise ValueError("key_password_env is the password of key_file: set key_file too")
        return self

    def key_password(self) -> SecretStr | None:
        """The key file's password from the environment, or None (an unencrypted key)."""
        return read_secret(self.key_password_env) if self.key_password_env else None
