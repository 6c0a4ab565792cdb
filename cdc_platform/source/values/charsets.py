"""MySQL/MariaDB charsets decoded exactly as the server decodes them, and losslessly.

Python's codecs are not MySQL's charsets: cp1250 byte 0x81, which a cp1250 column stores
without complaint, makes Python's cp1250 codec raise, and dec8, hp8, swe7, keybcs2, armscii8
and geostd8 have no Python codec at all. So single-byte charsets are decoded with MySQL's own
byte-to-Unicode tables (below, as MariaDB 10.11 converts every byte; the integration tests
check all 256 bytes of every single-byte charset against the server's CONVERT).

A byte the charset does not define (the server's CONVERT turns it into '?', or U+FFFD for
tis620) becomes U+EF00 + byte, in Unicode's private use area: nothing is lost and the stream
never stops. No single-byte charset maps a byte into U+EF00-U+EFFF, so that form cannot be
mistaken for a real character of those charsets. Multi-byte charsets use Python's codec with
the same escape for any byte sequence the codec rejects (docs/types.md).

The charset of a column comes from its collation id in the table map. MariaDB 10.10+ numbers
its uca1400 collations from 2048 up, with the charset in bits 8-10; mysql-replication does not
know those ids and silently assumes utf8, which garbles ucs2/utf16/utf32 text.
"""

from __future__ import annotations

import codecs
from collections.abc import Callable
from typing import Final

from pymysqlreplication.constants.CHARSET import charset_by_id

__all__ = [
    "ESCAPE_BASE",
    "Decode",
    "charset_of_collation",
    "server_text_is_exact",
    "text_decoder",
]

Decode = Callable[[bytes], str]
"""Bytes of one value in a column's charset -> its text; never raises."""

ESCAPE_BASE: Final = 0xEF00
"""An undefined byte b is chr(ESCAPE_BASE + b)."""

_ESCAPE_ERRORS: Final = "cdc-platform-byte-escape"


def _escape(exc: UnicodeError) -> tuple[str, int]:
    """Codec error handler: each byte a codec cannot decode becomes U+EF00 + byte."""
    if isinstance(exc, UnicodeDecodeError):
        bad = exc.object[exc.start : exc.end]
        return "".join(chr(ESCAPE_BASE + b) for b in bad), exc.end
    raise exc


codecs.register_error(_ESCAPE_ERRORS, _escape)

# -- single-byte charsets -----------------------------------------------------------------------

# fmt: off
_DERIVED: dict[str, tuple[str, dict[int, int | None]]] = {
    "ascii": ("ascii", {}),
    "cp1250": ("cp1250", {}),
    "cp1251": ("cp1251", {}),
    "cp1256": ("cp1256", {
        0x8A: None, 0x8F: None, 0x98: None, 0x9A: None, 0x9F: None, 0xAA: None,
        0xC0: None, 0xFF: None,
    }),
    "cp1257": ("cp1257", {}),
    "cp850": ("cp850", {}),
    "cp852": ("cp852", {}),
    "cp866": ("cp866", {0xFC: 0x207F, 0xFD: 0x00B2}),
    "dec8": ("latin-1", {
        0xA4: None, 0xA6: None, 0xA8: 0x00A4, 0xAC: None, 0xAD: None, 0xAE: None,
        0xAF: None, 0xB4: None, 0xB8: None, 0xBE: None, 0xD0: None, 0xD7: 0x0152,
        0xDD: 0x0178, 0xDE: None, 0xF0: None, 0xF7: 0x0153, 0xFD: 0x00FF, 0xFE: None,
        0xFF: None,
    }),
    "greek": ("iso8859_7", {0xA1: 0x02BD, 0xA2: 0x02BC, 0xA4: None, 0xA5: None, 0xAA: None}),
    "hebrew": ("iso8859_8", {0xAF: 0x203E}),
    "keybcs2": ("cp437", {
        0x80: 0x010C, 0x83: 0x010F, 0x85: 0x010E, 0x86: 0x0164, 0x87: 0x010D, 0x88: 0x011B,
        0x89: 0x011A, 0x8A: 0x0139, 0x8B: 0x00CD, 0x8C: 0x013E, 0x8D: 0x013A, 0x8F: 0x00C1,
        0x91: 0x017E, 0x92: 0x017D, 0x95: 0x00D3, 0x96: 0x016F, 0x97: 0x00DA, 0x98: 0x00FD,
        0x9B: 0x0160, 0x9C: 0x013D, 0x9D: 0x00DD, 0x9E: 0x0158, 0x9F: 0x0165, 0xA4: 0x0148,
        0xA5: 0x0147, 0xA6: 0x016E, 0xA7: 0x00D4, 0xA8: 0x0161, 0xA9: 0x0159, 0xAA: 0x0155,
        0xAB: 0x0154,
    }),
    "koi8r": ("koi8_r", {}),
    "koi8u": ("koi8_u", {0x95: 0x2022}),
    "latin1": ("cp1252", {0x81: 0x0081, 0x8D: 0x008D, 0x8F: 0x008F, 0x90: 0x0090, 0x9D: 0x009D}),
    "latin2": ("iso8859_2", {}),
    "latin5": ("iso8859_9", {}),
    "latin7": ("iso8859_13", {}),
    "macce": ("mac_latin2", {}),
    "macroman": ("mac_roman", {}),
    "swe7": ("ascii", {
        0x40: 0x00C9, 0x5B: 0x00C4, 0x5C: 0x00D6, 0x5D: 0x00C5, 0x5E: 0x00DC, 0x60: 0x00E9,
        0x7B: 0x00E4, 0x7C: 0x00F6, 0x7D: 0x00E5, 0x7E: 0x00FC, 0x7F: None,
    }),
    "tis620": ("tis_620", {}),
}
"""MySQL's table as (Python codec for the same bytes, {byte: code point or None where MySQL
differs}); None marks a byte MySQL leaves undefined. Measured on MariaDB 10.11."""

_HIGH_HALF: dict[str, tuple[int | None, ...]] = {
    "armscii8": (
        0x0080, 0x0081, 0x0082, 0x0083, 0x0084, 0x0085, 0x0086, 0x0087,  # 0x80
        0x0088, 0x0089, 0x008A, 0x008B, 0x008C, 0x008D, 0x008E, 0x008F,  # 0x88
        0x0090, 0x0091, 0x0092, 0x0093, 0x0094, 0x0095, 0x0096, 0x0097,  # 0x90
        0x0098, 0x0099, 0x009A, 0x009B, 0x009C, 0x009D, 0x009E, 0x009F,  # 0x98
        0x00A0, 0x2741, 0x00A7, 0x0589, 0x0029, 0x0028, 0x00BB, 0x00AB,  # 0xA0
        0x2014, 0x002E, 0x055D, 0x002C, 0x002D, 0x055F, 0x2026, 0x055C,  # 0xA8
        0x055B, 0x055E, 0x0531, 0x0561, 0x0532, 0x0562, 0x0533, 0x0563,  # 0xB0
        0x0534, 0x0564, 0x0535, 0x0565, 0x0536, 0x0566, 0x0537, 0x0567,  # 0xB8
        0x0538, 0x0568, 0x0539, 0x0569, 0x053A, 0x056A, 0x053B, 0x056B,  # 0xC0
        0x053C, 0x056C, 0x053D, 0x056D, 0x053E, 0x056E, 0x053F, 0x056F,  # 0xC8
        0x0540, 0x0570, 0x0541, 0x0571, 0x0542, 0x0572, 0x0543, 0x0573,  # 0xD0
        0x0544, 0x0574, 0x0545, 0x0575, 0x0546, 0x0576, 0x0547, 0x0577,  # 0xD8
        0x0548, 0x0578, 0x0549, 0x0579, 0x054A, 0x057A, 0x054B, 0x057B,  # 0xE0
        0x054C, 0x057C, 0x054D, 0x057D, 0x054E, 0x057E, 0x054F, 0x057F,  # 0xE8
        0x0550, 0x0580, 0x0551, 0x0581, 0x0552, 0x0582, 0x0553, 0x0583,  # 0xF0
        0x0554, 0x0584, 0x0555, 0x0585, 0x0556, 0x0586, 0x2019, 0x0027,  # 0xF8
    ),
    "geostd8": (
        0x20AC, None, 0x201A, None, 0x201E, 0x2026, 0x2020, 0x2021,  # 0x80
        None, 0x2030, None, 0x2039, None, None, None, None,  # 0x88
        None, 0x2018, 0x2019, 0x201C, 0x201D, 0x2022, 0x2013, 0x2014,  # 0x90
        None, None, None, 0x203A, None, None, None, None,  # 0x98
        0x00A0, 0x00A1, 0x00A2, 0x00A3, 0x00A4, 0x00A5, 0x00A6, 0x00A7,  # 0xA0
        0x00A8, 0x00A9, 0x00AA, 0x00AB, 0x00AC, 0x00AD, 0x00AE, 0x00AF,  # 0xA8
        0x00B0, 0x00B1, 0x00B2, 0x00B3, 0x00B4, 0x00B5, 0x00B6, 0x00B7,  # 0xB0
        0x00B8, 0x00B9, 0x00BA, 0x00BB, 0x00BC, 0x00BD, 0x00BE, 0x00BF,  # 0xB8
        0x10D0, 0x10D1, 0x10D2, 0x10D3, 0x10D4, 0x10D5, 0x10D6, 0x10F1,  # 0xC0
        0x10D7, 0x10D8, 0x10D9, 0x10DA, 0x10DB, 0x10DC, 0x10F2, 0x10DD,  # 0xC8
        0x10DE, 0x10DF, 0x10E0, 0x10E1, 0x10E2, 0x10F3, 0x10E3, 0x10E4,  # 0xD0
        0x10E5, 0x10E6, 0x10E7, 0x10E8, 0x10E9, 0x10EA, 0x10EB, 0x10EC,  # 0xD8
        0x10ED, 0x10EE, 0x10F4, 0x10EF, 0x10F0, 0x10F5, None, None,  # 0xE0
        None, None, None, None, None, None, None, None,  # 0xE8
        None, None, None, None, None, None, None, None,  # 0xF0
        None, None, None, None, None, 0x2116, None, None,  # 0xF8
    ),
    "hp8": (
        0x0080, 0x0081, 0x0082, 0x0083, 0x0084, 0x0085, 0x0086, 0x0087,  # 0x80
        0x0088, 0x0089, 0x008A, 0x008B, 0x008C, 0x008D, 0x008E, 0x008F,  # 0x88
        0x0090, 0x0091, 0x0092, 0x0093, 0x0094, 0x0095, 0x0096, 0x0097,  # 0x90
        0x0098, 0x0099, 0x009A, 0x009B, 0x009C, 0x009D, 0x009E, 0x009F,  # 0x98
        0x00A0, 0x00C0, 0x00C2, 0x00C8, 0x00CA, 0x00CB, 0x00CE, 0x00CF,  # 0xA0
        0x00B4, 0x02CB, 0x02C6, 0x00A8, 0x02DC, 0x00D9, 0x00DB, 0x20A4,  # 0xA8
        0x00AF, 0x00DD, 0x00FD, 0x00B0, 0x00C7, 0x00E7, 0x00D1, 0x00F1,  # 0xB0
        0x00A1, 0x00BF, 0x00A4, 0x00A3, 0x00A5, 0x00A7, 0x0192, 0x00A2,  # 0xB8
        0x00E2, 0x00EA, 0x00F4, 0x00FB, 0x00E1, 0x00E9, 0x00F3, 0x00FA,  # 0xC0
        0x00E0, 0x00E8, 0x00F2, 0x00F9, 0x00E4, 0x00EB, 0x00F6, 0x00FC,  # 0xC8
        0x00C5, 0x00EE, 0x00D8, 0x00C6, 0x00E5, 0x00ED, 0x00F8, 0x00E6,  # 0xD0
        0x00C4, 0x00EC, 0x00D6, 0x00DC, 0x00C9, 0x00EF, 0x00DF, 0x00D4,  # 0xD8
        0x00C1, 0x00C3, 0x00E3, 0x00D0, 0x00F0, 0x00CD, 0x00CC, 0x00D3,  # 0xE0
        0x00D2, 0x00D5, 0x00F5, 0x0160, 0x0161, 0x00DA, 0x0178, 0x00FF,  # 0xE8
        0x00DE, 0x00FE, 0x00B7, 0x00B5, 0x00B6, 0x00BE, 0x2014, 0x00BC,  # 0xF0
        0x00BD, 0x00AA, 0x00BA, 0x00AB, 0x25A0, 0x00BB, 0x00B1, None,  # 0xF8
    ),
}
# fmt: on
"""Bytes 0x80-0xFF of the charsets without a Python codec (0x00-0x7F are ASCII)."""


def _table(codepoints: list[int | None]) -> str:
    return "".join(
        chr(ESCAPE_BASE + b) if cp is None else chr(cp) for b, cp in enumerate(codepoints)
    )


def _derived(codec: str, overrides: dict[int, int | None]) -> str:
    codepoints: list[int | None] = []
    for b in range(256):
        try:
            codepoints.append(ord(bytes((b,)).decode(codec)))
        except UnicodeDecodeError:
            codepoints.append(None)
    for b, cp in overrides.items():
        codepoints[b] = cp
    return _table(codepoints)


def _single_byte_tables() -> dict[str, str]:
    tables = {name: _derived(codec, overrides) for name, (codec, overrides) in _DERIVED.items()}
    for name, high in _HIGH_HALF.items():
        tables[name] = _table([*range(128), *high])
    return tables


_SINGLE_BYTE: Final = _single_byte_tables()


def _charmap(table: str) -> Decode:
    charmap_decode = codecs.charmap_decode

    def decode(raw: bytes) -> str:
        return charmap_decode(raw, "strict", table)[0]

    return decode


# -- multi-byte charsets ------------------------------------------------------------------------

_MULTI_BYTE: Final = {
    "utf8": "utf-8",
    "utf8mb3": "utf-8",
    "utf8mb4": "utf-8",
    "ucs2": "utf-16-be",  # MySQL's UCS-2/UTF-16/UTF-32 are big-endian without a BOM
    "utf16": "utf-16-be",
    "utf16le": "utf-16-le",
    "utf32": "utf-32-be",
    "big5": "big5",
    "sjis": "shift_jis",
    "cp932": "cp932",
    "ujis": "euc_jp",
    "eucjpms": "euc_jp",
    "euckr": "euc_kr",
    "gb2312": "gb2312",
    "gbk": "gbk",
    "gb18030": "gb18030",
}


def _codec(codec: str) -> Decode:
    def decode(raw: bytes) -> str:
        return raw.decode(codec, _ESCAPE_ERRORS)

    return decode


def text_decoder(charset: str) -> Decode | None:
    """The decoder of a MySQL/MariaDB charset name (``latin1``, ``utf16``, ``cp1250``...);
    None for ``binary`` and for a name this module does not know."""
    name = charset.lower()
    table = _SINGLE_BYTE.get(name)
    if table is not None:
        return _charmap(table)
    codec = _MULTI_BYTE.get(name)
    return None if codec is None else _codec(codec)


def server_text_is_exact(charset: str) -> bool:
    """Whether the server's own utf8mb4 text of a column equals :func:`text_decoder`'s (the
    utf8 charsets, stored verbatim); other columns must be read as bytes and decoded here."""
    return charset.lower() in ("utf8", "utf8mb3", "utf8mb4")


_UCA1400_FIRST: Final = 2048
_UCA1400_CHARSETS: Final = ("utf8mb3", "utf8mb4", "ucs2", "utf16", "utf32")


def charset_of_collation(collation_id: int, *, mariadb: bool) -> str | None:
    """The charset name of a collation id from a table map; None for an unknown id (the
    caller refuses the column rather than guess, unlike mysql-replication's utf8)."""
    if mariadb and collation_id >= _UCA1400_FIRST:
        index = (collation_id - _UCA1400_FIRST) >> 8
        return _UCA1400_CHARSETS[index] if index < len(_UCA1400_CHARSETS) else None
    charset = charset_by_id(collation_id, "mariadb" if mariadb else "mysql")
    return None if charset is None else str(charset.name)
