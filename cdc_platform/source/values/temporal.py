"""DATE, TIME, DATETIME, TIMESTAMP and YEAR as text, zero and partial dates included.

TIMESTAMP is printed in UTC whatever the process's time zone; the 5.6 formats (``*2``) carry
fractional seconds, the older ones none. Texts of recent values are cached: rows written
together share their timestamps.
"""

from __future__ import annotations

import time

from cdc_platform.source.values.columns import Reader

__all__ = [
    "datetime2_reader",
    "read_date",
    "read_datetime_v1",
    "read_time_v1",
    "read_timestamp_v1",
    "read_year",
    "time2_reader",
    "timestamp2_reader",
]


_FRAC_MULTIPLIER = (0, 10000, 10000, 100, 100, 1, 1)

_ZERO_TIME_SUFFIX = ("", ".0", ".00", ".000", ".0000", ".00000", ".000000")


def read_year(data: bytes, pos: int) -> tuple[int, int]:
    """YEAR: one byte, years since 1900; 0 is the zero year 0000, not 1900."""
    value = data[pos]
    return (value + 1900 if value else 0), pos + 1


def read_date(data: bytes, pos: int) -> tuple[str, int]:
    """DATE as 'YYYY-MM-DD', zero and partial dates included."""
    value = int.from_bytes(data[pos : pos + 3], "little")
    return (
        f"{value >> 9:04d}-{(value >> 5) & 15:02d}-{value & 31:02d}",
        pos + 3,
    )


def read_datetime_v1(data: bytes, pos: int) -> tuple[str, int]:
    """Pre-5.6 DATETIME: the decimal digits YYYYMMDDhhmmss in a little-endian uint64."""
    value = int.from_bytes(data[pos : pos + 8], "little")
    date, clock = divmod(value, 1000000)
    return (
        f"{date // 10000:04d}-{date // 100 % 100:02d}-{date % 100:02d} "
        f"{clock // 10000:02d}:{clock // 100 % 100:02d}:{clock % 100:02d}",
        pos + 8,
    )


def read_time_v1(data: bytes, pos: int) -> tuple[str, int]:
    """Pre-5.6 TIME: signed decimal digits [-]HHMMSS in 3 bytes."""
    value = int.from_bytes(data[pos : pos + 3], "little", signed=True)
    sign = "-" if value < 0 else ""
    value = abs(value)
    return (
        f"{sign}{value // 10000:02d}:{value // 100 % 100:02d}:{value % 100:02d}",
        pos + 3,
    )


def read_timestamp_v1(data: bytes, pos: int) -> tuple[str, int]:
    """Pre-5.6 TIMESTAMP: UTC epoch seconds, no fraction."""
    seconds = int.from_bytes(data[pos : pos + 4], "little")
    return _timestamp_text(seconds, 0, 0), pos + 4


_TIMESTAMP_TEXT: dict[int, str] = {}
"""epoch seconds -> 'YYYY-MM-DDTHH:MM:SS' (rows written together share their timestamps)."""


def _timestamp_text(seconds: int, micros: int, fsp: int) -> str:
    """TIMESTAMP is stored as UTC epoch seconds: print it in UTC, whatever the local zone."""
    if seconds == 0 and micros == 0:
        # 0 is the zero TIMESTAMP; 1970-01-01 00:00:00 UTC is outside TIMESTAMP's range.
        return "0000-00-00 00:00:00" + _ZERO_TIME_SUFFIX[fsp]
    text = _TIMESTAMP_TEXT.get(seconds)
    if text is None:
        t = time.gmtime(seconds)
        text = (
            f"{t.tm_year:04d}-{t.tm_mon:02d}-{t.tm_mday:02d}"
            f"T{t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d}"
        )
        if len(_TIMESTAMP_TEXT) >= _CACHE_LIMIT:
            _TIMESTAMP_TEXT.clear()
        _TIMESTAMP_TEXT[seconds] = text
    if fsp:
        return f"{text}{f'.{micros:06d}'[: fsp + 1]}Z"
    return text + "Z"


def _frac_reader(fsp: int) -> tuple[int, int]:
    """Bytes and microsecond multiplier of the fractional part for a precision (5.6 format)."""
    return (fsp + 1) // 2, _FRAC_MULTIPLIER[fsp]


_CACHE_LIMIT = 65536

_DATE_TEXT: dict[int, str] = {}
"""DATETIME2 year*13+month and day bits -> 'YYYY-MM-DD'."""

_CLOCK_TEXT: dict[int, str] = {}
"""DATETIME2 hour/minute/second bits -> 'HH:MM:SS'."""


def _date_text(ymd: int) -> str:
    text = _DATE_TEXT.get(ymd)
    if text is None:
        year_month = ymd >> 5
        text = f"{year_month // 13:04d}-{year_month % 13:02d}-{ymd & 31:02d}"
        if len(_DATE_TEXT) >= _CACHE_LIMIT:
            _DATE_TEXT.clear()
        _DATE_TEXT[ymd] = text
    return text


def _clock_text(hms: int) -> str:
    text = _CLOCK_TEXT.get(hms)
    if text is None:
        text = f"{hms >> 12:02d}:{(hms >> 6) & 63:02d}:{hms & 63:02d}"
        _CLOCK_TEXT[hms] = text  # at most 2**17 keys
    return text


def datetime2_reader(fsp: int) -> Reader:
    """DATETIME(fsp) in the 5.6 format, as 'YYYY-MM-DD hh:mm:ss[.f]'."""
    nbytes, multiplier = _frac_reader(fsp)
    size = 5 + nbytes
    last_raw, last_text = b"", ""
    # The last value's bytes and text: the rows of one statement often share a value
    # (``NOW()`` is fixed for a statement; bulk loads and multi-row updates).

    def read(data: bytes, pos: int) -> tuple[str, int]:
        nonlocal last_raw, last_text
        raw = data[pos : pos + size]
        if raw == last_raw:
            return last_text, pos + size
        packed = int.from_bytes(raw[:5], "big") - 0x8000000000
        text = f"{_date_text(packed >> 17)} {_clock_text(packed & 0x1FFFF)}"
        if nbytes:
            micros = int.from_bytes(raw[5:], "big") * multiplier
            text += f".{micros:06d}"[: fsp + 1]
        last_raw, last_text = raw, text
        return text, pos + size

    return read


def timestamp2_reader(fsp: int) -> Reader:
    """TIMESTAMP(fsp) in the 5.6 format, in UTC."""
    nbytes, multiplier = _frac_reader(fsp)
    size = 4 + nbytes

    def read(data: bytes, pos: int) -> tuple[str, int]:
        seconds = int.from_bytes(data[pos : pos + 4], "big")
        micros = int.from_bytes(data[pos + 4 : pos + size], "big") * multiplier if nbytes else 0
        return _timestamp_text(seconds, micros, fsp), pos + size

    return read


def time2_reader(fsp: int) -> Reader:
    """TIME in the 5.6 format, following MySQL's my_time_packed_from_binary.

    The integer part is offset by 0x800000 and, for negative values with a fraction, the
    stored integer part is one less with the fraction counted up from it; mysql-replication
    ignores that and returns -3600.75 s for '-01:00:00.250'.
    """
    nbytes, multiplier = _frac_reader(fsp)
    size = 3 + nbytes

    def read(data: bytes, pos: int) -> tuple[str, int]:
        if fsp >= 5:
            packed = int.from_bytes(data[pos : pos + 6], "big") - 0x800000000000
        else:
            intpart = int.from_bytes(data[pos : pos + 3], "big") - 0x800000
            frac = int.from_bytes(data[pos + 3 : pos + size], "big") if nbytes else 0
            if intpart < 0 and frac:
                intpart += 1
                frac -= 1 << (8 * nbytes)
            packed = (intpart << 24) + frac * multiplier
        sign = "-" if packed < 0 else ""
        packed = abs(packed)
        hms = packed >> 24
        text = f"{sign}{(hms >> 12) & 1023:02d}:{(hms >> 6) & 63:02d}:{hms & 63:02d}"
        if fsp:
            text += f".{packed & 0xFFFFFF:06d}"[: fsp + 1]
        return text, pos + size

    return read
