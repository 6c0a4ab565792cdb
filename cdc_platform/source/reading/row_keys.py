"""A chunk's last raw key as JSON and back: where a snapshot or a reconciliation resumes.

The progress file keeps the key the next chunk starts after; the values must bind back to
exactly what the driver read (bytes, decimals and floats tagged, so that JSON does not turn
them into text or a rounded number). A FLOAT or DOUBLE key comes back as a Decimal of the
driver's double; the reader binds it as a float (:mod:`.key_forms`), never as the Decimal.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

__all__ = ["decode_key", "encode_key"]


def encode_key(values: Sequence[Any]) -> list[Any]:
    """A raw key as JSON-safe values for the progress file (bytes tagged as base64)."""
    out: list[Any] = []
    for value in values:
        if isinstance(value, bytes | bytearray):
            out.append({"b64": base64.b64encode(value).decode("ascii")})
        elif isinstance(value, int | str) or value is None:
            out.append(value)
        elif isinstance(value, Decimal | float):
            out.append({"num": str(value)})
        else:
            out.append(str(value))
    return out


def decode_key(values: Sequence[Any]) -> list[Any]:
    """The inverse of :func:`encode_key`, as values pymysql can bind."""
    out: list[Any] = []
    for value in values:
        if isinstance(value, dict) and "b64" in value:
            out.append(base64.b64decode(value["b64"]))
        elif isinstance(value, dict) and "num" in value:
            out.append(Decimal(value["num"]))
        else:
            out.append(value)
    return out
