"""Character and binary strings, ENUM and SET: text in the column's charset, bytes as base64."""

from __future__ import annotations

from cdc_platform.errors import SourceError
from cdc_platform.source.values.charsets import text_decoder
from cdc_platform.source.values.columns import Reader
from cdc_platform.source.values.wire import b64, length_prefixed

__all__ = ["binary_reader", "enum_reader", "set_reader", "text_reader"]


def enum_reader(values: tuple[str, ...], size: int) -> Reader:
    """ENUM as its value's text (the binlog stores the 1-based index)."""
    # Index 0 is the '' a lax sql_mode stores for an invalid value.
    table = ("", *values)

    def read(data: bytes, pos: int) -> tuple[str, int]:
        index = int.from_bytes(data[pos : pos + size], "little")
        return (table[index] if index < len(table) else ""), pos + size

    return read


def set_reader(values: tuple[str, ...], size: int) -> Reader:
    """SET as the list of its members (the binlog stores a bit mask); empty is []."""

    def read(data: bytes, pos: int) -> tuple[list[str], int]:
        mask = int.from_bytes(data[pos : pos + size], "little")
        return [v for i, v in enumerate(values) if mask >> i & 1], pos + size

    return read


def text_reader(prefix: int, charset: str) -> Reader:
    """Text in a column's charset, decoded as the server does (never fails: charsets.py)."""
    decode = text_decoder(charset)
    if decode is None:
        raise SourceError(f"charset {charset!r} is not known")
    if prefix == 1:

        def read1(data: bytes, pos: int) -> tuple[str, int]:
            end = pos + 1 + data[pos]
            return decode(data[pos + 1 : end]), end

        return read1
    if prefix == 2:

        def read2(data: bytes, pos: int) -> tuple[str, int]:
            end = pos + 2 + (data[pos] | data[pos + 1] << 8)
            return decode(data[pos + 2 : end]), end

        return read2
    raw_reader = length_prefixed(prefix)

    def read_n(data: bytes, pos: int) -> tuple[str, int]:
        raw, end = raw_reader(data, pos)
        return decode(raw), end

    return read_n


def binary_reader(prefix: int, pad_to: int) -> Reader:
    """Binary strings as base64; BINARY(n) padded back to n bytes (the binlog strips 0x00)."""
    raw_reader = length_prefixed(prefix)
    if pad_to:

        def read_padded(data: bytes, pos: int) -> tuple[str, int]:
            raw, end = raw_reader(data, pos)
            return b64(raw.ljust(pad_to, b"\x00")), end

        return read_padded

    def read(data: bytes, pos: int) -> tuple[str, int]:
        raw, end = raw_reader(data, pos)
        return b64(raw), end

    return read
