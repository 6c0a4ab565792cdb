"""Plain autocommit connections to a destination's source, for reads outside the binlog.

The snapshot, the reconciliation and its repair read tables with ordinary SELECTs. They all
need the same session: autocommit (each SELECT is one consistent read, no transaction held
open), utf8mb4, and the UTC session time zone, so TIMESTAMP text is the instant in UTC as the
binlog source writes it.
"""

from __future__ import annotations

from typing import Any

import pymysql
from pydantic import SecretStr

from cdc_platform.config.models import SourceConfig
from cdc_platform.errors import SourceError

__all__ = ["SIDE_READ_TIMEOUT_SECONDS", "connect_source"]

SIDE_READ_TIMEOUT_SECONDS = 120.0
"""Longest wait for the server's answer on a side connection (snapshot, reconciliation,
repair): a partitioned server fails the read instead of blocking it forever."""


def connect_source(
    source: SourceConfig,
    password: SecretStr | str | None = None,
    *,
    purpose: str,
    read_timeout: float | None = SIDE_READ_TIMEOUT_SECONDS,
) -> pymysql.connections.Connection[Any]:
    """A connection for ``purpose`` (named in errors); the password from the environment
    unless given. Reads and writes wait at most ``read_timeout`` seconds (None: forever).

    Raises:
        SourceError: the server cannot be reached or refused the login (no password shown).
    """
    secret = password if password is not None else source.password()
    text = secret.get_secret_value() if isinstance(secret, SecretStr) else secret
    try:
        return pymysql.connect(
            host=source.host,
            port=source.port,
            user=source.user,
            password=text,
            connect_timeout=source.connect_timeout_seconds,
            read_timeout=read_timeout,
            write_timeout=read_timeout,
            autocommit=True,
            charset="utf8mb4",
            init_command="SET time_zone = '+00:00'",
        )
    except (pymysql.MySQLError, OSError) as exc:
        message = str(exc).replace(text, "***") if text else str(exc)
        raise SourceError(
            f"{purpose}: cannot connect to {source.host}:{source.port}: {message}"
        ) from None
