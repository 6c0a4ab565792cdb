"""Source names in Spark: quoted identifiers and mirror locations.

MySQL names may hold any character: a column ``a.b`` is not the field ``b`` of ``a`` to
Spark unless quoted, and a backtick must be doubled inside the quotes. Every Spark reference
to a source column goes through :func:`col` / :func:`quote_identifier`.

Mirror directories are named ``<db>.<table>``. Spelled plainly, database ``a.b`` + table
``c`` and database ``a`` + table ``b.c`` would share ``a.b.c``; and the engine treats a local
path as a URL, so ``?``, ``#``, ``%``, ``[``, spaces or non-ASCII letters in it land in another
directory than the one named, or in the parent (measured on Sail 0.7.2). So
:func:`location_name` keeps ASCII letters, digits, ``_``, ``$`` and ``-`` and writes every
other character's UTF-8 bytes as ``@XX`` (``@`` itself is ``@40``, ``.`` is ``@2E``): the one
``.`` left is the separator, and the encoding is injective. Names of identifier characters,
the usual ones, keep the plain ``<db>.<table>`` of earlier releases.
"""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F  # noqa: N812 (the PySpark idiom)

__all__ = ["DELETED", "FIRST_KIND", "KIND", "SEQ", "col", "location_name", "quote_identifier"]

DELETED = "_cdc_deleted"
"""Plan column: the change removes the row (or, in merge rows of keyless tables, a marker)."""
SEQ = "_cdc_seq"
KIND = "_cdc_kind"
FIRST_KIND = "_cdc_first_kind"

_KEPT = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_$-")


def quote_identifier(name: str) -> str:
    """``name`` as a Spark SQL identifier: in backticks, backticks doubled."""
    return "`" + name.replace("`", "``") + "`"


def col(name: str) -> Column:
    """The column called ``name``, whatever characters it holds (no struct-field parsing)."""
    return F.col(quote_identifier(name))


def _encode(part: str) -> str:
    out: list[str] = []
    for ch in part:
        if ch in _KEPT:
            out.append(ch)
        else:
            out.extend(f"@{b:02X}" for b in ch.encode("utf-8"))
    return "".join(out)


def location_name(db: str, table: str) -> str:
    """``<db>.<table>`` with each part percent-encoded where needed (see the module doc)."""
    return f"{_encode(db)}.{_encode(table)}"
