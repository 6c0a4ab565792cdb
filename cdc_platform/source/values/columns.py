"""The column model the decoders work from, and the JSON text every row image is written in.

Nothing here knows pymysqlreplication: :class:`ColumnSpec` is the plain description of a column
that ``table_maps.py`` builds from a table-map event.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

__all__ = ["ColumnSpec", "FieldType", "Reader", "dumps"]


Reader = Callable[[bytes, int], tuple[Any, int]]
"""Decodes one non-NULL column value at an offset; returns the value and the next offset."""


class FieldType:
    """MySQL protocol column type codes, as they appear in table-map events."""

    DECIMAL: Final = 0
    TINY: Final = 1
    SHORT: Final = 2
    LONG: Final = 3
    FLOAT: Final = 4
    DOUBLE: Final = 5
    NULL: Final = 6
    TIMESTAMP: Final = 7
    LONGLONG: Final = 8
    INT24: Final = 9
    DATE: Final = 10
    TIME: Final = 11
    DATETIME: Final = 12
    YEAR: Final = 13
    NEWDATE: Final = 14
    VARCHAR: Final = 15
    BIT: Final = 16
    TIMESTAMP2: Final = 17
    DATETIME2: Final = 18
    TIME2: Final = 19
    JSON: Final = 245
    NEWDECIMAL: Final = 246
    ENUM: Final = 247
    SET: Final = 248
    TINY_BLOB: Final = 249
    MEDIUM_BLOB: Final = 250
    LONG_BLOB: Final = 251
    BLOB: Final = 252
    VAR_STRING: Final = 253
    STRING: Final = 254
    GEOMETRY: Final = 255


@dataclass(frozen=True, slots=True)
class ColumnSpec:
    """What the decoder needs to know about one column (from the table-map event).

    ``encoding`` is the MySQL charset name (``utf8mb4``, ``cp1250``...) of character columns
    and None for binary ones; :mod:`cdc_platform.source.values.charsets` decodes it.
    ``logical`` names a MariaDB type stored under another binlog type: ``uuid``, ``inet4``,
    ``inet6`` (all BINARY(n) in the binlog) or ``json`` (LONGTEXT in the binlog); the binlog
    does not say, so the source looks it up in information_schema.
    """

    name: str
    type: int
    unsigned: bool = False
    encoding: str | None = None
    max_length: int = 0
    """Byte length of CHAR/BINARY/VARCHAR/VARBINARY."""
    length_size: int = 0
    """Bytes of the length prefix of BLOB/TEXT/GEOMETRY/JSON values."""
    fsp: int = 0
    """Fractional-second digits of TIME/DATETIME/TIMESTAMP."""
    precision: int = 0
    scale: int = 0
    bits: int = 0
    """Width of BIT(n)."""
    size: int = 0
    """Storage bytes of ENUM/SET values."""
    enum_values: tuple[str, ...] = ()
    set_values: tuple[str, ...] = ()
    logical: str | None = None


def _compact_json() -> Callable[[Any], str]:
    """``json.dumps(value, ensure_ascii=False, separators=(",", ":"), check_circular=False)``
    with the C encoder built once: ``JSONEncoder.encode`` builds it anew on every call, which
    costs about a third of encoding a row image."""
    options = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), check_circular=False)
    make_encoder = getattr(json.encoder, "c_make_encoder", None)
    if make_encoder is None:  # an interpreter without the C accelerator
        return options.encode
    encode = make_encoder(
        None,  # no circular-reference markers (check_circular=False)
        options.default,
        json.encoder.encode_basestring,  # ensure_ascii=False
        None,  # no indent
        options.key_separator,
        options.item_separator,
        options.sort_keys,
        options.skipkeys,
        options.allow_nan,
    )
    join = "".join

    def dumps(value: Any) -> str:
        return join(encode(value, 0))

    return dumps


dumps: Callable[[Any], str] = _compact_json()
"""Compact JSON text of a row image (see :func:`_compact_json`)."""
