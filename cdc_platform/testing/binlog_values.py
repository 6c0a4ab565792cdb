"""Encoders of MySQL's binary row formats (DECIMAL, TIME2, DATETIME2), the inverse of the
source's decoders: tests and benches build rows events' bytes with them."""

from __future__ import annotations

import struct

__all__ = ["encode_datetime2", "encode_decimal", "encode_time2"]

_DIG2BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)


def encode_decimal(text: str, precision: int, scale: int) -> bytes:
    """decimal2bin: digit groups of 9 big-endian, complemented if negative, sign bit flipped."""
    negative = text.startswith("-")
    int_part, _, frac_part = text.lstrip("-").partition(".")
    intg = precision - scale
    int_digits = int_part.rjust(intg, "0")[-intg:] if intg else ""
    frac_digits = frac_part.ljust(scale, "0")[:scale]
    out = bytearray()
    lead = intg % 9
    if lead:
        out += int(int_digits[:lead]).to_bytes(_DIG2BYTES[lead], "big")
    for i in range(lead, intg, 9):
        out += int(int_digits[i : i + 9]).to_bytes(4, "big")
    for i in range(0, scale - scale % 9, 9):
        out += int(frac_digits[i : i + 9]).to_bytes(4, "big")
    if scale % 9:
        out += int(frac_digits[scale - scale % 9 :]).to_bytes(_DIG2BYTES[scale % 9], "big")
    if negative:
        out = bytearray(b ^ 0xFF for b in out)
    out[0] ^= 0x80
    return bytes(out)


def _c_remainder(a: int, b: int) -> int:
    return a - b * int(a / b) if a >= 0 else -((-a) % b)


def encode_time2(negative: bool, hms: tuple[int, int, int], micros: int, fsp: int) -> bytes:
    """my_time_packed_to_binary of TIME_to_longlong_time_packed (C integer semantics)."""
    h, m, s = hms
    packed = (((h << 12) | (m << 6) | s) << 24) + micros
    if negative:
        packed = -packed
    if fsp >= 5:
        return (packed + 0x800000000000).to_bytes(6, "big")
    int_part = packed >> 24  # arithmetic shift, as in C on a signed longlong
    frac = _c_remainder(packed, 1 << 24)
    head = (int_part + 0x800000).to_bytes(3, "big")
    if fsp == 0:
        return head
    if fsp <= 2:
        return head + struct.pack(">b", int(frac / 10000))
    return head + struct.pack(">h", int(frac / 100))


def encode_datetime2(
    date: tuple[int, int, int], clock: tuple[int, int, int], micros: int, fsp: int
) -> bytes:
    y, mo, d = date
    h, mi, s = clock
    ymd = ((y * 13 + mo) << 5) | d
    hms = (h << 12) | (mi << 6) | s
    out = (((ymd << 17) | hms) + 0x8000000000).to_bytes(5, "big")
    return out + _frac(micros, fsp)


def _frac(micros: int, fsp: int) -> bytes:
    if fsp == 0:
        return b""
    if fsp <= 2:
        return (micros // 10000).to_bytes(1, "big")
    if fsp <= 4:
        return (micros // 100).to_bytes(2, "big")
    return micros.to_bytes(3, "big")
