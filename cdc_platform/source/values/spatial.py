"""Geometry columns: the SRID and the WKB, which is what the server stores."""

from __future__ import annotations

from typing import Any

from cdc_platform.source.values.columns import Reader
from cdc_platform.source.values.wire import b64, length_prefixed

__all__ = ["geometry_reader"]


def geometry_reader(prefix: int) -> Reader:
    """Geometry as {"srid": n, "wkb": base64}: the server stores a 4-byte SRID before the WKB."""
    raw_reader = length_prefixed(prefix)

    def read(data: bytes, pos: int) -> tuple[dict[str, Any], int]:
        raw, end = raw_reader(data, pos)
        return {"srid": int.from_bytes(raw[:4], "little"), "wkb": b64(raw[4:])}, end

    return read
