"""Source names in Spark: quoted identifiers, the engine's own columns, mirror locations.

MySQL names may hold any character: a column ``a.b`` is not the field ``b`` of ``a`` to
Spark unless quoted, and a backtick must be doubled inside the quotes. Every Spark reference
to a source column goes through :func:`col` / :func:`quote_identifier`.

Plans, merges and comparisons carry columns of their own beside a table's (the newest
change's seq, a delete flag, a row hash...). A source table may have a column of any name,
``pk`` or ``_cdc_seq`` included, so those names are not constants: :func:`engine_columns`
picks, per table, a prefix that no column name of the table starts with (compared without
case, as Spark and MySQL resolve names), and every engine column is that prefix plus a role.
Usual tables get the prefix ``_cdc_``.

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

from collections.abc import Iterable
from dataclasses import dataclass

from pyspark.sql import Column
from pyspark.sql import functions as F  # noqa: N812 (the PySpark idiom)

__all__ = ["EngineColumns", "col", "engine_columns", "location_name", "quote_identifier"]

_PREFIX = "_cdc_"


@dataclass(frozen=True, slots=True)
class EngineColumns:
    """The engine's column names for one table: ``prefix`` + role, where no column of the
    table starts with ``prefix`` (see the module doc), so none can equal a source column."""

    prefix: str = _PREFIX

    def of(self, role: str) -> str:
        """The engine column for ``role`` (e.g. ``"hash"``)."""
        return self.prefix + role

    def numbered(self, role: str, index: int) -> str:
        """The ``index``-th engine column of ``role`` (one per key column, say)."""
        return f"{self.prefix}{role}_{index}"

    @property
    def deleted(self) -> str:
        """Plan column: the change removes the row (in keyless merge rows, a marker)."""
        return self.of("deleted")

    @property
    def seq(self) -> str:
        """Plan column: the change-log seq of the change."""
        return self.of("seq")

    @property
    def kind(self) -> str:
        """Plan column: insert, update or delete."""
        return self.of("kind")

    @property
    def first_kind(self) -> str:
        """Plan column: the kind of a key's first change in the range."""
        return self.of("first_kind")


def engine_columns(names: Iterable[str]) -> EngineColumns:
    """Engine column names that no name of ``names`` can equal, in any case."""
    folded = [n.lower() for n in names] + [n.casefold() for n in names]
    prefix = _PREFIX
    while any(n.startswith(prefix) for n in folded):
        prefix = prefix[:-1] + "__"  # _cdc_ -> _cdc__ -> _cdc___ ...: names are finite
    return EngineColumns(prefix)


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
