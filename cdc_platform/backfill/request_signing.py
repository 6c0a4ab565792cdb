"""Signed requests to a destination's lease holder (repairs, snapshots): the key, the
signature and the checks every request passes before it is served.

A request in the lake is an authority to make the holder write its change log, so the holder
honours only requests this platform wrote: each carries an HMAC-SHA256 over its content, with
a key derived from the destination's source password (a secret both sides already read from
the environment and never write anywhere) and the kind of request (a repair's signature does
not sign a snapshot request). A signed request is served once: a copy written again later is a
replay, refused because its result exists (the holder's memory of served ids) or because it is
older than :data:`MAX_REQUEST_AGE_SECONDS`.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any, Literal

from pydantic import SecretStr

from cdc_platform.config.source import SourceConfig
from cdc_platform.errors import ConfigError

__all__ = [
    "MAX_REQUEST_AGE_SECONDS",
    "RequestKind",
    "request_key",
    "sign_request",
    "signing_key",
    "verify_request",
]

RequestKind = Literal["repair", "snapshot"]

MAX_REQUEST_AGE_SECONDS = 24 * 3600.0
"""A signed request older than this (by its signed submission time) is refused: a copy of an
old request replayed later is not an order from a current requester."""
MAX_CLOCK_AHEAD_SECONDS = 300.0
"""Tolerated skew between the requester's and the holder's wall clocks."""

_CONTEXTS: dict[RequestKind, bytes] = {
    "repair": b"cdc-platform repair request v1\0",
    "snapshot": b"cdc-platform snapshot request v1\0",
}


def signing_key(
    secret: SecretStr | str, destination: str, kind: RequestKind = "repair"
) -> bytes | None:
    """The ``kind`` request key of ``destination``: HMAC-SHA256 of the destination's name under
    the source password. None when the password is empty (nothing secret to derive from: then
    no request can be signed or honoured)."""
    text = secret.get_secret_value() if isinstance(secret, SecretStr) else secret
    if not text:
        return None
    context = _CONTEXTS[kind] + destination.encode()
    return hmac.new(text.encode(), context, hashlib.sha256).digest()


def request_key(source: SourceConfig, destination: str, kind: RequestKind) -> bytes | None:
    """The key from the destination's source settings; None when its password variable is
    unset or empty (every request then refused)."""
    try:
        return signing_key(source.password(), destination, kind)
    except ConfigError:
        return None


def sign_request(key: bytes, item: dict[str, Any]) -> str:
    """The signature of ``item`` (every field but ``signature``)."""
    body = {k: v for k, v in item.items() if k != "signature"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), default=str)
    return hmac.new(key, text.encode(), hashlib.sha256).hexdigest()


def verify_request(
    key: bytes | None,
    item: dict[str, Any],
    request_id: str,
    *,
    now: float,
    max_age: float = MAX_REQUEST_AGE_SECONDS,
) -> str | None:
    """Why ``item`` (read from ``<request_id>.json``) must not be served, or None."""
    if key is None:
        return "this process has no key to verify requests with (the source password is unset)"
    signature = item.get("signature")
    if not isinstance(signature, str):
        return "the request is not signed"
    if not hmac.compare_digest(signature, sign_request(key, item)):
        return "wrong signature (not written by this platform)"
    if item.get("id") != request_id:
        return f"the request's id {item.get('id')!r} is not its file name"
    return _age_problem(item, now, max_age)


def _age_problem(item: dict[str, Any], now: float, max_age: float) -> str | None:
    try:
        age = now - float(item["submitted_at"])
    except (KeyError, TypeError, ValueError):
        return "no submission time"
    if not -MAX_CLOCK_AHEAD_SECONDS <= age <= max_age:
        return f"submitted {age:.0f} s ago, outside the accepted age"
    return None
