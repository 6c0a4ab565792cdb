"""MariaDB's UUID, INET4 and INET6 (BINARY(n) in the binlog) as the text the server prints."""

from __future__ import annotations

from collections.abc import Callable

from cdc_platform.source.values.columns import Reader
from cdc_platform.source.values.wire import length_prefixed

__all__ = ["LOGICAL_BINARY", "format_inet6", "logical_reader"]


def _uuid_text(raw: bytes) -> str:
    h = raw.ljust(16, b"\x00").hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def _inet4_text(raw: bytes) -> str:
    return ".".join(str(b) for b in raw.ljust(4, b"\x00"))


def format_inet6(raw: bytes) -> str:
    """INET6 text as MariaDB prints it (RFC 5952 style, IPv4-mapped/compatible dotted).

    The longest run of zero groups (the first of equal runs, even a single group) becomes
    '::'; ``::a.b.c.d`` and ``::ffff:a.b.c.d`` keep the IPv4 part dotted.
    """
    raw = raw.ljust(16, b"\x00")
    words = [raw[i] << 8 | raw[i + 1] for i in range(0, 16, 2)]
    gap_pos, gap_len = -1, 0
    run_pos, run_len = -1, 0
    for i, word in enumerate(words):
        if word == 0:
            if run_pos < 0:
                run_pos, run_len = i, 1
            else:
                run_len += 1
            if run_len > gap_len:
                gap_pos, gap_len = run_pos, run_len
        else:
            run_pos, run_len = -1, 0
    out: list[str] = []
    i = 0
    while i < 8:
        if i == gap_pos:
            out.append("::" if i == 0 else ":")
            i += gap_len
            continue
        if i == 6 and gap_pos == 0 and (gap_len == 6 or (gap_len == 5 and words[5] == 0xFFFF)):
            out.append(".".join(str(b) for b in raw[12:]))
            break
        out.append(f"{words[i]:x}")
        if i != 7:
            out.append(":")
        i += 1
    return "".join(out)


def logical_reader(prefix: int, fmt: Callable[[bytes], str]) -> Reader:
    """A BINARY(n) column of a logical type, printed by ``fmt``."""
    raw_reader = length_prefixed(prefix)

    def read(data: bytes, pos: int) -> tuple[str, int]:
        raw, end = raw_reader(data, pos)
        return fmt(raw), end

    return read


LOGICAL_BINARY: dict[tuple[str, int], Callable[[bytes], str]] = {
    ("uuid", 16): _uuid_text,
    ("inet4", 4): _inet4_text,
    ("inet6", 16): format_inet6,
}
