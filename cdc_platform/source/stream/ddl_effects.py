"""What a DDL statement does to the rows of the tables it names, beyond what the binlog shows.

A ROW-format binlog logs DDL as text and no row events for the rows it changes. Most DDL
leaves stored values alone (indexes, options, renamed or dropped columns: the next row images
show the new shape). The rest changes rows silently, and a change log that only copies row
events would go stale. :func:`ddl_effects` names those tables and what happened to them:

* :attr:`Effect.REREAD`: values changed in place: ``ADD COLUMN`` with a default, ``NOT NULL``
  (the implicit default: 0, '', the zero date), ``AUTO_INCREMENT`` or a generated value;
  ``MODIFY`` / ``CHANGE`` (a conversion may round, truncate or re-encode every row);
  ``CONVERT TO CHARACTER SET``. The source re-reads the table.
* :attr:`Effect.REPLACED`: rows vanished or were swapped in: ``TRUNCATE`` / ``DROP`` /
  ``EXCHANGE PARTITION`` (both tables of an exchange), ``CONVERT PARTITION p TO TABLE t2``
  (both tables), ``CONVERT TABLE t2 TO PARTITION p``, ``CREATE OR REPLACE TABLE``, the new
  name of ``RENAME TABLE`` / ``ALTER TABLE ... RENAME``. The mirror starts again from the
  statement and the source re-reads the table.
* :attr:`Effect.DROPPED`: the table is gone: ``DROP TABLE`` (each table of the list), the old
  name of a rename (``renamed_to`` says where), the table a ``CONVERT TABLE ... TO
  PARTITION`` absorbed, ``DROP DATABASE`` (``table`` is ``""``: every table of the
  database).

Conservative on purpose: a statement it cannot read in full costs at most one extra re-read,
never a missed one, for the statement kinds above.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

from cdc_platform.source.sql import split_top_level, strip_comments

__all__ = ["Effect", "TableEffect", "ddl_effects"]


class Effect(StrEnum):
    """What a statement did to a table's rows; see the module docstring."""

    REREAD = "reread"
    REPLACED = "replaced"
    DROPPED = "dropped"


@dataclass(frozen=True, slots=True)
class TableEffect:
    """One table's effect; ``table`` is ``""`` for a whole database (``DROP DATABASE``)."""

    db: str
    table: str
    effect: Effect
    renamed_to: tuple[str, str] | None = None

    @property
    def rereads(self) -> bool:
        """Whether the source must copy the table again for its rows to be right."""
        return self.effect in (Effect.REREAD, Effect.REPLACED)


_IDENT = r"(?:`(?:[^`]|``)+`|[\w$]+)"
_QNAME = rf"(?:{_IDENT}(?:\s*\.\s*{_IDENT})?)"
_FLAGS = re.IGNORECASE | re.DOTALL
_NAME = re.compile(rf"(?P<a>{_IDENT})(?:\s*\.\s*(?P<b>{_IDENT}))?")

_DROP_TABLE = re.compile(
    rf"DROP\s+(?P<temp>TEMPORARY\s+)?TABLES?\s+(?:IF\s+EXISTS\s+)?"
    rf"(?P<names>{_QNAME}(?:\s*,\s*{_QNAME})*)",
    _FLAGS,
)
_RENAME_TABLE = re.compile(
    rf"RENAME\s+TABLES?\s+(?:IF\s+EXISTS\s+)?(?P<pairs>{_QNAME}(?:\s+WAIT\s+\d+|\s+NOWAIT)?\s+TO\s+"
    rf"{_QNAME}(?:\s*,\s*{_QNAME}\s+TO\s+{_QNAME})*)",
    _FLAGS,
)
_PAIR = re.compile(
    rf"(?P<old>{_QNAME})(?:\s+WAIT\s+\d+|\s+NOWAIT)?\s+TO\s+(?P<new>{_QNAME})", _FLAGS
)
_ALTER = re.compile(
    rf"ALTER\s+(?:ONLINE\s+)?(?:IGNORE\s+)?TABLE\s+(?:IF\s+EXISTS\s+)?(?P<name>{_QNAME})"
    rf"(?:\s+(?:WAIT\s+\d+|NOWAIT))?(?P<rest>.*)$",
    _FLAGS,
)
_CREATE_REPLACE = re.compile(
    rf"CREATE\s+OR\s+REPLACE\s+(?P<temp>TEMPORARY\s+)?TABLE\s+(?P<name>{_QNAME})", _FLAGS
)
_DROP_DATABASE = re.compile(
    rf"DROP\s+(?:DATABASE|SCHEMA)\s+(?:IF\s+EXISTS\s+)?(?P<db>{_IDENT})", _FLAGS
)
_NOT_A_COLUMN = frozenset(
    {
        "INDEX", "KEY", "PRIMARY", "UNIQUE", "FULLTEXT", "SPATIAL", "FOREIGN", "CONSTRAINT",
        "CHECK", "PERIOD", "SYSTEM", "VECTOR",
    }
)  # fmt: skip
_VALUE_WORDS = re.compile(
    r"\bNOT\s+NULL\b|\bDEFAULT\b|\bAUTO_INCREMENT\b|\bGENERATED\b|\bAS\s*\(|\bSERIAL\b", _FLAGS
)
_IMPLICIT_TIMESTAMP = re.compile(rf"{_IDENT}\s+TIMESTAMP\b", _FLAGS)
_EXPLICIT_NULL = re.compile(r"(?<!NOT)\s+NULL\b", _FLAGS)
_DEFAULT_NULL = re.compile(r"\bDEFAULT\s+NULL\b", _FLAGS)
_WITHOUT_VALUE = re.compile(r"\bNOT\s+NULL\b|\bAUTO_INCREMENT\b|\bGENERATED\b|\bAS\s*\(", _FLAGS)
_REPLACING_PARTITION = re.compile(
    r"(?:(?:TRUNCATE|DROP|EXCHANGE|CONVERT)\s+PARTITION|CONVERT\s+TABLE)\b", _FLAGS
)
_OTHER_TABLE = re.compile(
    rf"\b(?:EXCHANGE\s+PARTITION\b.*?\bWITH\s+TABLE|CONVERT\s+PARTITION\b.*?\bTO\s+TABLE"
    rf"|CONVERT\s+TABLE)\s+(?P<name>{_QNAME})",
    _FLAGS,
)
_ALTER_RENAME = re.compile(
    rf"^RENAME\s+(?!COLUMN\b|INDEX\b|KEY\b|CONSTRAINT\b)(?:TO\s+|AS\s+)?(?P<name>{_QNAME})", _FLAGS
)
_CONVERT = re.compile(r"^CONVERT\s+TO\s+(?:CHARACTER\s+SET|CHARSET)\b", _FLAGS)


def _unquote(ident: str) -> str:
    ident = ident.strip()
    if ident.startswith("`") and ident.endswith("`"):
        return ident[1:-1].replace("``", "`")
    return ident


def _name(text: str, default_db: str) -> tuple[str, str]:
    match = _NAME.match(text.strip())
    assert match is not None  # only called on text a _QNAME matched
    if match.group("b") is None:
        return default_db, _unquote(match.group("a"))
    return _unquote(match.group("a")), _unquote(match.group("b"))


def _names(text: str, default_db: str) -> list[tuple[str, str]]:
    return [_name(m.group(0), default_db) for m in re.finditer(_QNAME, text)]


def _adds_values(definition: str) -> bool:
    """Whether ``ADD [COLUMN] <definition>`` gives existing rows a value other than NULL."""
    head = definition.lstrip()
    if head.startswith("("):
        return True  # "ADD (a INT, b INT)": read conservatively
    words = head.split(None, 1)
    if not words or words[0].upper() in _NOT_A_COLUMN:
        return False
    if _IMPLICIT_TIMESTAMP.match(head) and not _EXPLICIT_NULL.search(head):
        return True  # without explicit_defaults_for_timestamp: NOT NULL DEFAULT now()
    if _DEFAULT_NULL.search(head) and not _WITHOUT_VALUE.search(head):
        return False
    return _VALUE_WORDS.search(head) is not None


def _clause_effect(clause: str) -> Effect | None:  # noqa: PLR0911 (one return per clause kind)
    words = clause.split(None, 1)
    if not words:
        return None
    verb, rest = words[0].upper(), (words[1] if len(words) > 1 else "")
    if _REPLACING_PARTITION.match(clause):
        return Effect.REPLACED
    if verb == "ADD":
        rest = re.sub(r"^(?:COLUMN\s+)?(?:IF\s+NOT\s+EXISTS\s+)?", "", rest, flags=_FLAGS)
        if re.match(r"PARTITION\b", rest, _FLAGS):
            return None
        return Effect.REREAD if _adds_values(rest) else None
    if verb in ("MODIFY", "CHANGE"):
        return Effect.REREAD
    if _CONVERT.match(clause):
        return Effect.REREAD
    return None


def _verb(clause: str) -> str:
    """The first two words of a clause, upper case (``CONVERT TABLE``, ``ADD COLUMN``...)."""
    return " ".join(clause.upper().split()[:2])


def _alter(match: re.Match[str], default_db: str) -> list[TableEffect]:
    db, table = _name(match.group("name"), default_db)
    effects: list[TableEffect] = []
    strongest: Effect | None = None
    renamed: tuple[str, str] | None = None
    for clause in split_top_level(match.group("rest")):
        rename = _ALTER_RENAME.match(clause)
        if rename is not None:
            renamed = _name(rename.group("name"), default_db)
            continue
        effect = _clause_effect(clause)
        if effect is Effect.REPLACED or (effect is Effect.REREAD and strongest is None):
            strongest = effect
        other = _OTHER_TABLE.search(clause)
        if other is not None:
            other_effect = Effect.DROPPED if _verb(clause) == "CONVERT TABLE" else Effect.REPLACED
            effects.append(TableEffect(*_name(other.group("name"), default_db), other_effect))
    if renamed is not None and renamed != (db, table):
        return [
            TableEffect(db, table, Effect.DROPPED, renamed_to=renamed),
            TableEffect(*renamed, Effect.REPLACED),
            *effects,
        ]
    if strongest is not None:
        effects.insert(0, TableEffect(db, table, strongest))
    return effects


def ddl_effects(sql: str, default_db: str) -> list[TableEffect]:  # noqa: PLR0911 (one return per statement kind)
    """The tables whose rows ``sql`` changed without row events, and how; see the module
    docstring. ``default_db`` is the statement's session database (``USE``)."""
    text = strip_comments(sql).rstrip(";").strip()
    match = _DROP_TABLE.match(text)
    if match is not None:
        if match.group("temp"):
            return []
        return [TableEffect(db, t, Effect.DROPPED) for db, t in _names(match["names"], default_db)]
    match = _RENAME_TABLE.match(text)
    if match is not None:
        effects: list[TableEffect] = []
        for pair in _PAIR.finditer(match.group("pairs")):
            old, new = _name(pair["old"], default_db), _name(pair["new"], default_db)
            effects.append(TableEffect(*old, Effect.DROPPED, renamed_to=new))
            effects.append(TableEffect(*new, Effect.REPLACED))
        return effects
    match = _ALTER.match(text)
    if match is not None:
        return _alter(match, default_db)
    match = _CREATE_REPLACE.match(text)
    if match is not None:
        if match.group("temp"):
            return []
        return [TableEffect(*_name(match["name"], default_db), Effect.REPLACED)]
    match = _DROP_DATABASE.match(text)
    if match is not None:
        return [TableEffect(_unquote(match["db"]), "", Effect.DROPPED)]
    return []
