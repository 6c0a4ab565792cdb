"""Database and service URLs from the configuration: parsed once, and never shown with a secret.

Passwords and tokens come from environment variables, never from files; a URL that carries one
anyway is refused, and every message that quotes a URL quotes it through `redact_url`, so a
mistyped URL cannot print the secret it holds.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal
from urllib.parse import unquote, urlsplit

__all__ = ["DatabaseKind", "DatabaseUrl", "parse_database_url", "redact_url"]

DatabaseKind = Literal["sqlite", "mysql", "postgresql"]

_KINDS: dict[str, DatabaseKind] = {
    "sqlite": "sqlite",
    "mysql": "mysql",
    "mariadb": "mysql",
    "postgresql": "postgresql",
    "postgres": "postgresql",
}

_REDACTED = "***"
# user:password@ after a scheme (or at the start, for a scheme-less "user:pw@host"); the
# password may itself hold '@' or '/', so the match runs to the last '@' before the host.
_USERINFO = re.compile(
    r"(?P<head>(?:[A-Za-z][A-Za-z0-9+.-]*://)|^)(?P<user>[^:/@\s]*):(?!//)(?P<pw>\S*)@"
)
# password=..., token=..., secret=... in a query string or ;key=value list
_PARAM = re.compile(
    r"(?P<key>(?:pass(?:word|wd)?|pwd|token|secret|api[_-]?key|access[_-]?key)=)(?P<value>[^&;\s]+)",
    re.IGNORECASE,
)


def redact_url(text: str) -> str:
    """``text`` with any password or token of a URL in it replaced by ``***``."""
    text = _USERINFO.sub(lambda m: f"{m['head']}{m['user']}:{_REDACTED}@", text)
    return _PARAM.sub(lambda m: f"{m['key']}{_REDACTED}", text)


def url_has_secret(url: str) -> bool:
    """Whether ``url`` carries a password or token (which belongs in the environment)."""
    return redact_url(url) != url


@dataclass(frozen=True, slots=True)
class DatabaseUrl:
    """A parsed lease/state database URL (never holds a password)."""

    kind: DatabaseKind
    path: Path | None = None
    host: str = "127.0.0.1"
    port: int | None = None
    user: str | None = None
    database: str | None = None

    def display(self) -> str:
        """The URL for messages."""
        if self.kind == "sqlite":
            return f"sqlite:///{self.path}"
        user = f"{self.user}@" if self.user else ""
        port = f":{self.port}" if self.port else ""
        return f"{self.kind}://{user}{self.host}{port}/{self.database or ''}"


def parse_database_url(url: str, base_dir: Path | None = None) -> DatabaseUrl:
    """``sqlite:///rel/path`` (relative to ``base_dir``), ``sqlite:////abs/path``,
    ``mysql://user@host:port/db`` (also ``mariadb://``), ``postgresql://user@host:port/db``.

    Raises ValueError with a message that never holds the URL's password; a password in the
    URL is refused (it belongs in an environment variable named by ``password_env``).
    """
    shown = redact_url(url)
    if url_has_secret(url):
        raise ValueError(
            f"database URL {shown!r} must not contain a password: put it in an environment "
            "variable and name it in password_env"
        )
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"database URL {shown!r} is not a valid URL ({exc})") from None
    scheme = parts.scheme.lower()
    if scheme not in _KINDS:
        raise ValueError(
            f"database URL {shown!r}: unknown scheme {scheme!r} "
            "(use sqlite, mysql, mariadb or postgresql)"
        )
    kind = _KINDS[scheme]
    if kind == "sqlite":
        raw = url[len("sqlite://") :]
        if not raw.startswith("/") or raw == "/":
            raise ValueError(f"database URL {shown!r}: expected sqlite:///path")
        path = Path(raw[1:])
        if not path.is_absolute() and base_dir is not None:
            path = base_dir / path
        return DatabaseUrl(kind, path=path)
    database = parts.path.lstrip("/") or None
    if database is None:
        raise ValueError(f"database URL {shown!r}: no database name")
    return DatabaseUrl(
        kind,
        host=parts.hostname or "127.0.0.1",
        port=port,
        user=unquote(parts.username) if parts.username else None,
        database=database,
    )
