"""Byte-level pieces every type family shares: length-prefixed values and base64 text."""

from __future__ import annotations

import binascii
from collections.abc import Callable

__all__ = ["b64", "length_prefixed"]


def b64(raw: bytes) -> str:
    """Binary as base64 text (JSON cannot hold bytes)."""
    return binascii.b2a_base64(raw, newline=False).decode("ascii")


def length_prefixed(prefix: int) -> Callable[[bytes, int], tuple[bytes, int]]:
    """Raw bytes of a value with a little-endian length prefix of ``prefix`` bytes."""
    if prefix == 1:

        def read1(data: bytes, pos: int) -> tuple[bytes, int]:
            end = pos + 1 + data[pos]
            return data[pos + 1 : end], end

        return read1
    if prefix == 2:

        def read2(data: bytes, pos: int) -> tuple[bytes, int]:
            end = pos + 2 + (data[pos] | data[pos + 1] << 8)
            return data[pos + 2 : end], end

        return read2

    def read_n(data: bytes, pos: int) -> tuple[bytes, int]:
        start = pos + prefix
        end = start + int.from_bytes(data[pos:start], "little")
        return data[start:end], end

    return read_n
