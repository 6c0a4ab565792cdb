"""Just enough MySQL/MariaDB DDL parsing for the mirrors to follow schema changes.

The change log's row events say which columns a table had (``columns``), so added and dropped
columns are known from the rows alone. Two facts are not: that a column was *renamed* (the
rows before and after show two unrelated names) and what DDL after the last row did (no row
has shown it yet). This module reads them from the DDL statements of the change log:

* ``ALTER TABLE`` clauses ``ADD [COLUMN]``, ``DROP [COLUMN]``, ``RENAME COLUMN a TO b``,
  ``CHANGE [COLUMN] a b <type>``, ``MODIFY [COLUMN] a <type>``;
* ``CREATE TABLE t (...)`` column definitions and primary key (a table that has no rows yet);
* ``TRUNCATE [TABLE]`` and ``DROP TABLE``, after which the table starts empty.

Anything else (indexes, options, partitions, statements it cannot read) is ignored: the next
row event's ``columns`` corrects the schema, so a miss costs at most a late column.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from cdc_platform.source.sql import split_top_level, strip_comments
from cdc_platform.source.stream.ddl_effects import TableEffect, ddl_effects
from cdc_platform.spark.types import TYPE_ALIASES, ColumnSpec, TableSchema

__all__ = [
    "AddColumn",
    "Clause",
    "DropColumn",
    "ModifyColumn",
    "RenameColumn",
    "apply_clauses",
    "create_table_schema",
    "creates_table",
    "dropped_reason",
    "is_reset",
    "parse_alter",
    "renames",
    "table_effect",
]

_IDENT = r"(?:`(?:[^`]|``)+`|[A-Za-z0-9_$\u0080-\uffff]+)"
_QUALIFIED = rf"{_IDENT}(?:\s*\.\s*{_IDENT})?"
_ALTER = re.compile(
    rf"^\s*ALTER\s+(?:ONLINE\s+|IGNORE\s+)*TABLE\s+(?:IF\s+EXISTS\s+)?{_QUALIFIED}\s*(.*)$",
    re.IGNORECASE | re.DOTALL,
)
_CREATE = re.compile(
    rf"^\s*CREATE\s+(?:OR\s+REPLACE\s+)?(?:TEMPORARY\s+)?TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?"
    rf"{_QUALIFIED}\s*\((.*)\)[^)]*$",
    re.IGNORECASE | re.DOTALL,
)
_CREATES = re.compile(r"^\s*CREATE\s+(?:OR\s+REPLACE\s+)?TABLE\b", re.IGNORECASE)
_RESET = re.compile(r"^\s*(?:TRUNCATE(?:\s+TABLE)?\s|DROP\s+(?:TEMPORARY\s+)?TABLE\s)", re.I)
_NOT_A_COLUMN = frozenset(
    {
        "INDEX", "KEY", "PRIMARY", "UNIQUE", "FULLTEXT", "SPATIAL", "FOREIGN", "CONSTRAINT",
        "CHECK", "PARTITION", "PERIOD", "SYSTEM",
    }
)  # fmt: skip
_TYPE = re.compile(r"^\s*([A-Za-z]+(?:\s+PRECISION)?)\s*(\(([^)]*)\))?(.*)$", re.DOTALL)
_QUOTED = re.compile(r"'((?:[^'\\]|''|\\.)*)'")


@dataclass(frozen=True, slots=True)
class AddColumn:
    """``ADD [COLUMN] name <type>``; ``spec`` is None when the type could not be read."""

    name: str
    spec: ColumnSpec | None
    first: bool = False
    after: str | None = None


@dataclass(frozen=True, slots=True)
class DropColumn:
    """``DROP [COLUMN] name``."""

    name: str


@dataclass(frozen=True, slots=True)
class RenameColumn:
    """``RENAME COLUMN old TO new`` or ``CHANGE old new <type>`` (``spec`` set for CHANGE)."""

    old: str
    new: str
    spec: ColumnSpec | None = None


@dataclass(frozen=True, slots=True)
class ModifyColumn:
    """``MODIFY name <type>``: same column, new type."""

    name: str
    spec: ColumnSpec | None


Clause = AddColumn | DropColumn | RenameColumn | ModifyColumn


def _unquote(ident: str) -> str:
    ident = ident.strip()
    if ident.startswith("`") and ident.endswith("`"):
        return ident[1:-1].replace("``", "`")
    return ident


def _take_ident(text: str) -> tuple[str, str] | None:
    match = re.match(rf"\s*({_IDENT})(.*)$", text, re.DOTALL)
    if match is None:
        return None
    return _unquote(match.group(1)), match.group(2)


def column_spec(name: str, definition: str) -> ColumnSpec | None:
    """A ColumnSpec from a column definition (``INT(11) UNSIGNED NOT NULL ...``), or None."""
    match = _TYPE.match(definition)
    if match is None:
        return None
    raw_type = re.sub(r"\s+", " ", match.group(1).lower())
    args = match.group(3)
    rest = match.group(4).upper()
    kind = TYPE_ALIASES.get(raw_type, raw_type)
    if kind in ("character", "nchar", "national"):
        kind = "char"
    elif kind in ("nvarchar", "varcharacter"):
        kind = "varchar"
    known = {
        "tinyint", "smallint", "mediumint", "int", "bigint", "decimal", "float", "double",
        "bit", "date", "datetime", "timestamp", "time", "year", "char", "varchar", "binary",
        "varbinary", "text", "blob", "enum", "set", "json", "geometry", "uuid", "inet4",
        "inet6",
    }  # fmt: skip
    if kind not in known:
        return None
    precision = scale = length = None
    values: tuple[str, ...] | None = None
    numbers = (
        [int(n) for n in re.findall(r"\d+", args or "")] if kind not in ("enum", "set") else []
    )
    if kind == "decimal":
        precision = numbers[0] if numbers else 10
        scale = numbers[1] if len(numbers) > 1 else 0
    elif kind in ("datetime", "timestamp", "time"):
        scale = numbers[0] if numbers else 0
    elif kind in ("char", "varchar", "binary", "varbinary", "bit"):
        length = numbers[0] if numbers else (1 if kind in ("char", "binary", "bit") else None)
    elif kind in ("enum", "set"):
        values = tuple(
            m.group(1).replace("''", "'").replace("\\'", "'") for m in _QUOTED.finditer(args or "")
        )
    pk = bool(re.search(r"\bPRIMARY\s+KEY\b", rest))
    return ColumnSpec(
        name=name,
        type=kind,
        unsigned=bool(re.search(r"\bUNSIGNED\b", rest)),
        precision=precision,
        scale=scale,
        length=length,
        pk=pk,
        values=values,
    )


def _strip(pattern: str, text: str) -> str:
    return re.sub(pattern, "", text, count=1, flags=re.I)


def _is_column(text: str) -> bool:
    """False for ADD/DROP of indexes, keys, constraints, partitions."""
    words = text.split(None, 1)
    return bool(words) and words[0].upper() not in _NOT_A_COLUMN and not text.startswith("(")


def _add(rest: str) -> Clause | None:
    rest = _strip(r"^\s*IF\s+NOT\s+EXISTS\s+", _strip(r"^\s*COLUMN\s+", rest)).lstrip()
    taken = _take_ident(rest) if _is_column(rest) else None  # "ADD (a INT, b INT)": next rows
    if taken is None:
        return None
    name, definition = taken
    after = re.search(rf"\bAFTER\s+({_IDENT})\s*$", definition, re.I)
    return AddColumn(
        name,
        column_spec(name, definition),
        first=bool(re.search(r"\bFIRST\s*$", definition, re.I)),
        after=_unquote(after.group(1)) if after else None,
    )


def _drop(rest: str) -> Clause | None:
    rest = _strip(r"^\s*IF\s+EXISTS\s+", _strip(r"^\s*COLUMN\s+", rest)).lstrip()
    taken = _take_ident(rest) if _is_column(rest) else None
    return DropColumn(taken[0]) if taken else None


def _rename(rest: str) -> Clause | None:
    match = re.match(rf"\s*COLUMN\s+({_IDENT})\s+TO\s+({_IDENT})\s*$", rest, re.I)
    if match is None:
        return None
    return RenameColumn(_unquote(match.group(1)), _unquote(match.group(2)))


def _change(rest: str) -> Clause | None:
    first = _take_ident(_strip(r"^\s*IF\s+EXISTS\s+", _strip(r"^\s*COLUMN\s+", rest)))
    second = _take_ident(first[1]) if first else None
    if first is None or second is None:
        return None
    return RenameColumn(first[0], second[0], column_spec(second[0], second[1]))


def _modify(rest: str) -> Clause | None:
    taken = _take_ident(_strip(r"^\s*IF\s+EXISTS\s+", _strip(r"^\s*COLUMN\s+", rest)))
    return ModifyColumn(taken[0], column_spec(taken[0], taken[1])) if taken else None


_CLAUSES = {"ADD": _add, "DROP": _drop, "RENAME": _rename, "CHANGE": _change, "MODIFY": _modify}


def _parse_clause(clause: str) -> Clause | None:
    words = clause.split(None, 1)
    parse = _CLAUSES.get(words[0].upper()) if words else None
    return parse(words[1] if len(words) > 1 else "") if parse else None


def parse_alter(statement: str) -> list[Clause]:
    """The column clauses of an ``ALTER TABLE`` statement; [] for anything else."""
    match = _ALTER.match(strip_comments(statement))
    if match is None:
        return []
    clauses = (_parse_clause(c) for c in split_top_level(match.group(1)))
    return [c for c in clauses if c is not None]


def renames(statement: str) -> list[tuple[str, str]]:
    """(old, new) column renames made by a statement, in order."""
    return [(c.old, c.new) for c in parse_alter(statement) if isinstance(c, RenameColumn)]


def is_reset(statement: str) -> bool:
    """TRUNCATE or DROP TABLE: the table has no rows afterwards."""
    return _RESET.match(strip_comments(statement)) is not None


def creates_table(statement: str) -> bool:
    """``CREATE [OR REPLACE] TABLE`` (not TEMPORARY): the table exists afterwards."""
    return _CREATES.match(strip_comments(statement)) is not None


def table_effect(
    statement: str, db: str, table: str, *, database_level: bool = False
) -> TableEffect | None:
    """What ``statement``, a DDL row recorded under ``db.table`` (``database_level``: under
    ``db`` and no table), did to the rows of ``db.table`` beyond its row events (see
    :mod:`cdc_platform.source.stream.ddl_effects`); None when nothing.

    Unqualified names are read in ``db``: the change log keeps the table's database, not the
    statement's session database.
    """
    for effect in ddl_effects(statement, db):
        if effect.db != db:
            continue
        if effect.table == table or (database_level and effect.table == ""):
            return effect
    return None


def dropped_reason(effect: TableEffect) -> str:
    """How a dropped mirror is described: "dropped", "renamed to db.t", "database dropped"."""
    if effect.renamed_to is not None:
        return "renamed to {}.{}".format(*effect.renamed_to)
    return "database dropped" if effect.table == "" else "dropped"


def create_table_schema(statement: str) -> TableSchema | None:
    """The columns of ``CREATE TABLE t (...)``, or None when it cannot be read."""
    match = _CREATE.match(strip_comments(statement))
    if match is None:
        return None
    specs: list[ColumnSpec] = []
    key: list[str] = []
    for item in split_top_level(match.group(1)):
        head = item.split(None, 1)[0].upper()
        primary = re.match(
            r"^(?:CONSTRAINT\s+\S+\s+)?PRIMARY\s+KEY\s*(?:\w+\s*)?\((.*)\)", item, re.I
        )
        if primary:
            key = [_unquote(re.sub(r"\(\d+\)", "", p)).strip() for p in primary.group(1).split(",")]
            key = [_unquote(k.split()[0]) for k in key]
            continue
        if head in _NOT_A_COLUMN:
            continue
        taken = _take_ident(item)
        if taken is None:
            return None
        spec = column_spec(*taken)
        if spec is None:
            return None
        specs.append(spec)
    if not specs:
        return None
    if key:
        specs = [replace(s, pk=s.name in key) for s in specs]
    return TableSchema(tuple(specs))


def apply_clauses(schema: TableSchema, clauses: list[Clause]) -> TableSchema:
    """The schema after ``clauses``; an added column whose type is unreadable is left out."""
    columns = list(schema.columns)

    def index(name: str) -> int | None:
        for i, spec in enumerate(columns):
            if spec.name.lower() == name.lower():
                return i
        return None

    for clause in clauses:
        if isinstance(clause, AddColumn):
            if clause.spec is None or index(clause.name) is not None:
                continue
            position = len(columns)
            if clause.first:
                position = 0
            elif clause.after is not None:
                found = index(clause.after)
                position = len(columns) if found is None else found + 1
            columns.insert(position, clause.spec)
        elif isinstance(clause, DropColumn):
            found = index(clause.name)
            if found is not None:
                del columns[found]
        elif isinstance(clause, RenameColumn):
            found = index(clause.old)
            if found is not None:
                old = columns[found]
                new = clause.spec or old
                columns[found] = replace(new, name=clause.new, pk=old.pk or new.pk)
        elif isinstance(clause, ModifyColumn):
            found = index(clause.name)
            if found is not None and clause.spec is not None:
                old = columns[found]
                columns[found] = replace(clause.spec, name=old.name, pk=old.pk or clause.spec.pk)
    return TableSchema(tuple(columns))
