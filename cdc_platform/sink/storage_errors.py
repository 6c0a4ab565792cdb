"""delta-rs and pyarrow failures, raised as SinkError with no storage secret in them.

Every module of the sink reads or writes the table through :class:`StorageGuard`, so a
credential in the storage options or in the table URI never reaches a message, a log line
or an exception chain.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import pyarrow as pa
from deltalake.exceptions import DeltaError

from cdc_platform.errors import SinkError
from cdc_platform.sink.local_lake import permanent_local_error

__all__ = ["LIBRARY_ERRORS", "Redactor", "StorageGuard"]

LIBRARY_ERRORS: tuple[type[BaseException], ...] = (
    DeltaError,
    OSError,
    pa.ArrowException,
    RuntimeError,
)
"""What delta-rs and pyarrow raise for I/O and table trouble; re-raised as SinkError."""

_SECRET_KEY = re.compile(r"secret|key|token|password|passwd|credential|sas|signature|auth", re.I)

T = TypeVar("T")


class Redactor:
    """Removes storage secrets (and credentials embedded in the URI) from text we show."""

    def __init__(self, table_uri: str, storage_options: dict[str, str] | None) -> None:
        secrets: set[str] = set()
        for key, value in (storage_options or {}).items():
            if value and (len(value) >= 8 or _SECRET_KEY.search(key)):
                secrets.add(value)
        parts = urlsplit(table_uri)
        if parts.password:
            secrets.add(parts.password)
        if parts.query:
            secrets.add(parts.query)
        self._secrets = sorted(secrets, key=len, reverse=True)
        netloc = parts.netloc.rsplit("@", 1)[-1]
        if "@" in parts.netloc:
            netloc = "***@" + netloc
        self.uri = urlunsplit((parts.scheme, netloc, parts.path, "***" if parts.query else "", ""))

    def __call__(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text

    def cause(self, exc: BaseException) -> BaseException:
        """``exc``, or a copy of it with the secrets removed when its message holds one."""
        text = str(exc)
        clean = self(text)
        if clean == text:
            return exc
        try:
            copy = type(exc)(clean)
        except Exception:  # any constructor problem: fall back to a plain error
            copy = RuntimeError(f"{type(exc).__name__}: {clean}")
        return copy.with_traceback(exc.__traceback__)


class StorageGuard:
    """One destination's table calls: library errors become redacted SinkErrors."""

    def __init__(self, destination: str, redact: Redactor) -> None:
        self.destination = destination
        self.redact = redact

    def call(self, what: str, call: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``call(*args, **kwargs)``; a library error is raised as SinkError("<what> failed")."""
        try:
            return call(*args, **kwargs)
        except LIBRARY_ERRORS as exc:
            raise self.error(f"{what} failed", exc) from self.redact.cause(exc)

    def error(self, what: str, exc: BaseException) -> SinkError:
        """A SinkError naming the destination, the (masked) table and the redacted cause
        (not transient for a local table that cannot be written: :mod:`.local_lake`)."""
        uri = self.redact.uri
        local = "://" not in uri or uri.startswith("file://")
        doing = f"{self.destination}: {what}"
        refusal = permanent_local_error(uri, exc, doing, self.redact) if local else None
        if refusal is not None:
            return refusal
        detail = self.redact(f"{type(exc).__name__}: {exc}")
        return SinkError(f"{self.destination}: {what} on {self.redact.uri}: {detail}")
