"""Charset decoding: MySQL's byte tables, the lossless escape, collation ids."""

from __future__ import annotations

import pytest

from cdc_platform.source.values.charsets import (
    ESCAPE_BASE,
    charset_of_collation,
    server_text_is_exact,
    text_decoder,
)

pytestmark = pytest.mark.unit

SINGLE_BYTE = [
    "armscii8",
    "ascii",
    "cp1250",
    "cp1251",
    "cp1256",
    "cp1257",
    "cp850",
    "cp852",
    "cp866",
    "dec8",
    "geostd8",
    "greek",
    "hebrew",
    "hp8",
    "keybcs2",
    "koi8r",
    "koi8u",
    "latin1",
    "latin2",
    "latin5",
    "latin7",
    "macce",
    "macroman",
    "swe7",
    "tis620",
]


def _decode(charset: str, raw: bytes) -> str:
    decode = text_decoder(charset)
    assert decode is not None, charset
    return decode(raw)


@pytest.mark.parametrize("charset", SINGLE_BYTE)
def test_every_byte_of_a_single_byte_charset_decodes_to_one_character(charset: str) -> None:
    text = _decode(charset, bytes(range(256)))
    assert len(text) == 256
    assert text[:0x20] == "".join(map(chr, range(0x20)))
    # The escape range is only ever used for undefined bytes, at their own position.
    for b, ch in enumerate(text):
        if ESCAPE_BASE <= ord(ch) <= ESCAPE_BASE + 0xFF:
            assert ord(ch) == ESCAPE_BASE + b


def test_mysql_tables_not_pythons() -> None:
    assert _decode("latin1", b"\x80\x81") == "€\x81"  # MySQL latin1 is cp1252 plus C1 controls
    assert _decode("cp1250", b"\x81\x83\x8a") == "\uef81\uef83Š"
    assert _decode("cp1257", b"\xa1") == "\uefa1"
    assert _decode("greek", b"\xa1\xa4") == "\u02bd\uefa4"  # MySQL's 0xA1, undefined 0xA4
    assert _decode("hebrew", b"\xaf\xe0") == "\u203eא"
    assert _decode("tis620", b"\xa1\xdb") == "ก\uefdb"  # the server says U+FFFD for 0xDB
    assert _decode("ascii", b"A\xff") == "A\uefff"
    assert _decode("swe7", b"[\\]") == "ÄÖÅ"
    assert _decode("dec8", b"\xd7") == "Œ"
    assert _decode("keybcs2", b"\x80") == "Č"
    assert _decode("armscii8", b"\xb2") == "Ա"
    assert _decode("geostd8", b"\xc0") == "ა"
    assert _decode("hp8", b"\xa1") == "À"


def test_multi_byte_charsets_are_big_endian_and_never_fail() -> None:
    assert _decode("utf8mb4", "😀é".encode()) == "😀é"
    assert _decode("ucs2", b"\x00A\x00\xe9") == "Aé"
    assert _decode("utf16", "😀".encode("utf-16-be")) == "😀"
    assert _decode("utf16le", "é".encode("utf-16-le")) == "é"
    assert _decode("utf32", "😀".encode("utf-32-be")) == "😀"
    assert _decode("sjis", "日本".encode("shift_jis")) == "日本"
    assert _decode("utf8mb4", b"a\xff") == "a\uefff"
    assert _decode("utf16", b"\x00A\xd8") == "A\uefd8"


def test_binary_and_unknown_charsets_have_no_text_decoder() -> None:
    assert text_decoder("binary") is None
    assert text_decoder("klingon") is None


def test_only_utf8_columns_can_be_read_as_server_text() -> None:
    assert server_text_is_exact("utf8mb4")
    assert server_text_is_exact("utf8mb3")
    assert not server_text_is_exact("latin1")
    assert not server_text_is_exact("utf16")


def test_collation_ids() -> None:
    assert charset_of_collation(45, mariadb=True) == "utf8mb4"
    assert charset_of_collation(26, mariadb=True) == "cp1250"
    assert charset_of_collation(63, mariadb=True) == "binary"
    # MariaDB 10.10+ uca1400: the charset is in bits 8-10 above 2048
    assert charset_of_collation(2048, mariadb=True) == "utf8mb3"
    assert charset_of_collation(2304, mariadb=True) == "utf8mb4"
    assert charset_of_collation(2560, mariadb=True) == "ucs2"
    assert charset_of_collation(2816 + 200, mariadb=True) == "utf16"
    assert charset_of_collation(3271, mariadb=True) == "utf32"
    assert charset_of_collation(3584, mariadb=True) is None
    assert charset_of_collation(255, mariadb=False) == "utf8mb4"  # MySQL 8 utf8mb4_0900_ai_ci
    assert charset_of_collation(9999, mariadb=False) is None
