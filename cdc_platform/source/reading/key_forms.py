"""How a primary-key column is read and bound back for keyset paging and lookups by key.

Every side reader pages with ``WHERE (key) > (last) ORDER BY key`` and looks rows up with
``WHERE (key) IN (...)`` (snapshot, reconciliation, repair, chunk sizing). The bound value
must compare with the column exactly as the column orders and matches, whatever the form
the value took on its way (the driver's value, the progress file's JSON, the change log's
``pk`` text): a key that compares a hair off re-reads its boundary row (one row per chunk: a
snapshot that never advances), skips rows, or misses a row that exists (a repair then writes
a delete for it, docs/faults.md).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cdc_platform.source.sql import format_safe
from cdc_platform.source.values.charsets import server_text_is_exact

__all__ = ["KeyForm", "key_form"]

_TEXT_TYPES = frozenset({"char", "varchar", "tinytext", "text", "mediumtext", "longtext"})
_FLOAT32 = struct.Struct("<f")

_TIME_KEY_BIND = "CAST(%s AS TIME(6))"
"""TIME keys are read as the server's text ('-00:30:00', '838:59:59'): pymysql's timedelta
binds -00:30:00 as '-1:30:00' and the progress file's str(timedelta) is no TIME at all."""


@dataclass(frozen=True, slots=True)
class KeyForm:
    """One key column's select and bind forms."""

    select: str = ""
    """SQL (names already ``format_safe``) whose value the driver returns exactly and that
    :attr:`bind` turns back into the column's own value (empty: the column itself)."""
    bind: str = "%s"
    """The SQL a bound raw key value goes through."""
    value: Callable[[Any], Any] | None = None
    """What a raw key value becomes before it is bound (None: bound as it is)."""


def _double(value: Any) -> float:
    """A DOUBLE key as a Python float: pymysql binds it as a double literal (``5e-324``,
    ``0.1e0``), which the server reads back exactly; the progress file's Decimal would be
    written out in full (``0.000…05``, more digits than a DECIMAL holds: another number)."""
    return float(value)


def _single(value: Any) -> float:
    """A FLOAT key as the double equal to its single-precision value: whether it arrives as
    that double, as the shortest text of the single (the change log's ``1.1``) or as the
    progress file's Decimal, it is rounded to single precision here, so the FLOAT column
    (compared as a double) equals it exactly; the decimal ``1.1`` is above a stored 1.1."""
    exact: float = _FLOAT32.unpack(_FLOAT32.pack(float(value)))[0]
    return exact


def key_form(quoted: str, data_type: str, row: dict[str, Any]) -> KeyForm:
    """How the key column ``quoted`` (its information_schema ``row``) is read and bound.

    - TIME: the server's text, cast back (see ``_TIME_KEY_BIND``).
    - ENUM and SET: their number. ``ORDER BY`` sorts them by index (ENUM) or bit value
      (SET), but a label bound as text compares as text: 'b' < 'a' when 'b' is the first
      label, so pages skip or repeat rows. Compared with a number, the column compares by
      that number too.
    - FLOAT: read as its exact double (the server prints a FLOAT with 6 digits: '123457' for
      123456.789), bound as the double of its single-precision value (:func:`_single`).
    - DOUBLE: bound as a float (:func:`_double`); the server prints doubles exactly.
    - CHAR/VARCHAR/TEXT in a charset whose text the utf8mb4 session cannot hold exactly
      (bytes the charset does not define read back as '?'): the column's bytes, bound back
      as that charset in the column's collation.
    """
    if data_type == "time":
        return KeyForm(format_safe(f"CAST({quoted} AS CHAR)"), _TIME_KEY_BIND)
    if data_type in ("enum", "set"):
        return KeyForm(format_safe(f"{quoted} + 0"))
    if data_type == "float":
        return KeyForm(format_safe(f"CAST({quoted} AS DOUBLE)"), value=_single)
    if data_type == "double":
        return KeyForm(value=_double)
    if data_type in _TEXT_TYPES:
        charset = str(row.get("CHARACTER_SET_NAME") or "utf8mb4")
        collation = row.get("COLLATION_NAME")
        if not server_text_is_exact(charset) and _is_name(charset) and _is_name(collation):
            return KeyForm(
                format_safe(f"CAST({quoted} AS BINARY)"),
                f"CAST(%s AS CHAR CHARACTER SET {charset}) COLLATE {collation}",
            )
    return KeyForm()


def _is_name(text: Any) -> bool:
    """A charset or collation name as information_schema gives it (letters, digits, _)."""
    return isinstance(text, str) and bool(text) and text.replace("_", "").isalnum()
