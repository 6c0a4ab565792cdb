"""JSON columns: MariaDB's (checked LONGTEXT) and MySQL's binary JSON, as JSON text.

A JSON column's value in a row image is a JSON *string* holding the document's text, not the
parsed document: the literal ``null`` (the text ``"null"``) stays distinct from SQL NULL
(``null``), a top-level string keeps its quotes, and numbers keep every digit (an integer
beyond 64 bits, ``1.0`` vs ``1``). MariaDB stores the text verbatim, so its text is kept
byte for byte, whitespace included. MySQL stores a binary form and prints it by fixed rules;
its text is printed here by the same rules (:mod:`.mysql_json`), so a snapshot's
``CAST(doc AS CHAR)`` is the same text.
"""

from __future__ import annotations

import struct
from typing import Any

from cdc_platform.errors import SourceError
from cdc_platform.source.values.columns import Reader
from cdc_platform.source.values.mysql_json import json_text
from cdc_platform.source.values.strings import text_reader
from cdc_platform.source.values.wire import length_prefixed

__all__ = ["json_text_reader", "mysql_json_reader"]


def json_text_reader(prefix: int, charset: str) -> Reader:
    """MariaDB JSON (LONGTEXT with a json_valid check): the stored text, as it is."""
    return text_reader(prefix, charset)


def mysql_json_reader(prefix: int, column: str) -> Reader:
    """MySQL binary JSON as the text the server prints for it (:mod:`.mysql_json`), the
    text a snapshot reads. Bytes that are not binary JSON stop the stream with a SourceError
    naming the column (the row decoder adds the table), not a bare ValueError."""
    raw_reader = length_prefixed(prefix)

    def read(data: bytes, pos: int) -> tuple[Any, int]:
        raw, end = raw_reader(data, pos)
        try:
            return json_text(raw), end
        except (ValueError, IndexError, struct.error) as exc:
            raise SourceError(
                f"column {column!r} holds {len(raw)} bytes that are not MySQL binary JSON "
                f"({exc}); a retry reads the same event and fails the same way: exclude the "
                "table from the destination's tables to get past it, snapshot the table "
                "afterwards, and report the event (mysqlbinlog --verbose at its position)"
            ) from None

    return read
