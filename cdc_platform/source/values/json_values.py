"""JSON columns: MariaDB's (checked LONGTEXT) and MySQL's binary JSON, as JSON text.

A JSON column's value in a row image is a JSON *string* holding the document's text, not the
parsed document: the literal ``null`` (the text ``"null"``) stays distinct from SQL NULL
(``null``), a top-level string keeps its quotes, and numbers keep every digit (an integer
beyond 64 bits, ``1.0`` vs ``1``). MariaDB stores the text verbatim, so its text is kept
byte for byte, whitespace included.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from cdc_platform.source.values.columns import Reader, dumps
from cdc_platform.source.values.strings import text_reader
from cdc_platform.source.values.wire import length_prefixed

__all__ = ["json_text_reader", "mysql_json_reader"]


def json_text_reader(prefix: int, charset: str) -> Reader:
    """MariaDB JSON (LONGTEXT with a json_valid check): the stored text, as it is."""
    return text_reader(prefix, charset)


def mysql_json_reader(prefix: int, decode: Callable[[bytes], Any]) -> Reader:
    """MySQL binary JSON, decoded by the library's parser ``decode`` and written as compact
    JSON text (MySQL keeps no text of its own); empty is NULL."""
    raw_reader = length_prefixed(prefix)

    def read(data: bytes, pos: int) -> tuple[Any, int]:
        raw, end = raw_reader(data, pos)
        return (dumps(decode(raw)) if raw else None), end

    return read
