"""JSON columns: MariaDB's (checked LONGTEXT) and MySQL's binary JSON, as parsed JSON values."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from cdc_platform.source.values.columns import Reader
from cdc_platform.source.values.strings import text_reader
from cdc_platform.source.values.wire import length_prefixed

__all__ = ["json_text_reader", "mysql_json_reader"]


def json_text_reader(prefix: int, charset: str) -> Reader:
    """MariaDB JSON (LONGTEXT with a json_valid check) as the parsed JSON value."""
    read_text = text_reader(prefix, charset)

    def read(data: bytes, pos: int) -> tuple[Any, int]:
        text, end = read_text(data, pos)
        try:
            return json.loads(text), end
        except ValueError:
            return text, end  # not valid JSON after all: keep the text rather than fail

    return read


def mysql_json_reader(prefix: int, decode: Callable[[bytes], Any]) -> Reader:
    """MySQL binary JSON, decoded by the library's parser ``decode``; empty is NULL."""
    raw_reader = length_prefixed(prefix)

    def read(data: bytes, pos: int) -> tuple[Any, int]:
        raw, end = raw_reader(data, pos)
        return (decode(raw) if raw else None), end

    return read
