"""Integers, FLOAT/DOUBLE, DECIMAL and BIT, exactly as stored (no float rounding of DECIMAL)."""

from __future__ import annotations

import struct
from typing import Any

from cdc_platform.source.values.columns import FieldType, Reader

__all__ = [
    "INTEGER_READERS",
    "bit_reader",
    "decimal_reader",
    "fixed_width",
    "read_float",
    "read_int24",
    "read_uint24",
]


_DIG2BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)

_FLOAT32 = struct.Struct("<f")


def fixed_width(fmt: str) -> Reader:
    """A reader of one ``struct`` format (little-endian, as the binlog stores numbers)."""
    unpack_from = struct.Struct(fmt).unpack_from
    size = struct.calcsize(fmt)

    def read(data: bytes, pos: int) -> tuple[Any, int]:
        return unpack_from(data, pos)[0], pos + size

    return read


def read_int24(data: bytes, pos: int) -> tuple[int, int]:
    """MEDIUMINT: three little-endian bytes, signed."""
    return int.from_bytes(data[pos : pos + 3], "little", signed=True), pos + 3


def read_uint24(data: bytes, pos: int) -> tuple[int, int]:
    """MEDIUMINT UNSIGNED: three little-endian bytes."""
    return int.from_bytes(data[pos : pos + 3], "little"), pos + 3


def read_float(data: bytes, pos: int) -> tuple[float, int]:
    """FLOAT as the shortest decimal that reads back as the same 32-bit float (1.1, not
    1.100000023841858): still exact, and what the server itself prints."""
    raw = data[pos : pos + 4]
    value: float = _FLOAT32.unpack(raw)[0]
    for digits in (6, 7, 8, 9):
        candidate = float(f"{value:.{digits}g}")
        if _FLOAT32.pack(candidate) == raw:
            return candidate, pos + 4
    return value, pos + 4


def decimal_reader(precision: int, scale: int) -> Reader:
    """DECIMAL as its exact text ('-12.50'), from MySQL's binary format (bin2decimal).

    The value is big-endian groups of 9 decimal digits (4 bytes each; the leading integer
    and trailing fraction groups shorter), complemented when negative, with the top bit
    flipped. Read as one integer, the groups are then cut out with shifts.
    """
    int_groups, int_rest = divmod(precision - scale, 9)
    frac_groups, frac_rest = divmod(scale, 9)
    int_rest_bytes = _DIG2BYTES[int_rest]
    frac_rest_bytes = _DIG2BYTES[frac_rest]
    size = int_groups * 4 + int_rest_bytes + frac_groups * 4 + frac_rest_bytes
    bits = size * 8
    sign_bit = 1 << (bits - 1)
    negative_mask = ((1 << bits) - 1) ^ sign_bit  # undo the complement and the sign flip
    # (shift, mask, decimal multiplier) of each group, most significant first
    int_parts: list[tuple[int, int, int]] = []
    shift = bits
    if int_rest_bytes:
        shift -= int_rest_bytes * 8
        int_parts.append((shift, (1 << (int_rest_bytes * 8)) - 1, 10**int_rest))
    for _ in range(int_groups):
        shift -= 32
        int_parts.append((shift, 0xFFFFFFFF, 10**9))
    frac_parts: list[tuple[int, int, int]] = []
    for _ in range(frac_groups):
        shift -= 32
        frac_parts.append((shift, 0xFFFFFFFF, 10**9))
    if frac_rest_bytes:
        shift -= frac_rest_bytes * 8
        frac_parts.append((shift, (1 << (frac_rest_bytes * 8)) - 1, 10**frac_rest))

    def read(data: bytes, pos: int) -> tuple[str, int]:
        value = int.from_bytes(data[pos : pos + size], "big")
        negative = not value & sign_bit
        value ^= negative_mask if negative else sign_bit
        whole = 0
        for part_shift, mask, multiplier in int_parts:
            whole = whole * multiplier + ((value >> part_shift) & mask)
        if scale:
            fraction = 0
            for part_shift, mask, multiplier in frac_parts:
                fraction = fraction * multiplier + ((value >> part_shift) & mask)
            text = f"{whole}.{fraction:0{scale}d}"
            if negative and (whole or fraction):
                text = "-" + text
        else:
            text = f"-{whole}" if negative and whole else str(whole)
        return text, pos + size

    return read


def bit_reader(bits: int) -> Reader:
    """BIT(n) as its n binary digits ('0101'), so every width stays exact."""
    nbytes = (bits + 7) // 8

    def read(data: bytes, pos: int) -> tuple[str, int]:
        value = int.from_bytes(data[pos : pos + nbytes], "big")
        return format(value, f"0{bits}b"), pos + nbytes

    return read


INTEGER_READERS: dict[tuple[int, bool], Reader] = {
    (FieldType.TINY, False): fixed_width("<b"),
    (FieldType.TINY, True): fixed_width("<B"),
    (FieldType.SHORT, False): fixed_width("<h"),
    (FieldType.SHORT, True): fixed_width("<H"),
    (FieldType.INT24, False): read_int24,
    (FieldType.INT24, True): read_uint24,
    (FieldType.LONG, False): fixed_width("<i"),
    (FieldType.LONG, True): fixed_width("<I"),
    (FieldType.LONGLONG, False): fixed_width("<q"),
    (FieldType.LONGLONG, True): fixed_width("<Q"),
}
