"""The swap of an online schema-change tool: the statement that makes its shadow the table.

pt-online-schema-change ends with ``RENAME TABLE t TO _t_old, _t_new TO t``, gh-ost with
``RENAME TABLE t TO _t_del, _t_gho TO t`` (or, cut over in two steps, ``ALTER TABLE _t_gho
RENAME TO t``). When the change log holds the shadow's whole life (its ``CREATE TABLE`` and
its rows after it: the tool's copy and the changes it replayed), the table's mirror takes the
shadow's rows at the swap and nothing is copied again (docs/ddl.md); the re-read after DDL and
the Spark mirror ask the same two questions through this module.
"""

from __future__ import annotations

from collections.abc import Iterable

from cdc_platform.source.online_ddl import transient_table
from cdc_platform.source.sql import strip_comments
from cdc_platform.source.stream.ddl_effects import Effect, ddl_effects

__all__ = ["ROW_OPS", "creates_table", "shadow_streamed", "swapped_in_shadow"]

ROW_OPS = frozenset({"c", "u", "d", "r"})
"""Change-log ops of row changes."""


def swapped_in_shadow(statement: str, db: str, table: str) -> str | None:
    """The shadow table that ``statement`` (a DDL row recorded under ``db.table``) renames to
    ``table`` (the tool's swap), or None when it is no such swap."""
    for effect in ddl_effects(statement, db):
        if effect.effect is not Effect.DROPPED or effect.renamed_to != (db, table):
            continue
        found = transient_table(effect.table)
        if effect.db == db and found is not None and found.shadow and found.target == table:
            return effect.table
    return None


def shadow_streamed(rows: Iterable[tuple[str, str | None]]) -> bool:
    """Whether a shadow's ``(op, ddl)`` rows, oldest first, hold its whole life: a ``CREATE
    TABLE`` and a row change after the newest one (an empty or half-seen copy is re-read)."""
    created = streamed = False
    for op, statement in rows:
        if op == "ddl" and statement is not None and creates_table(statement):
            created, streamed = True, False
        elif op in ROW_OPS and created:
            streamed = True
    return created and streamed


def creates_table(statement: str) -> bool:
    """``CREATE TABLE`` (not ``TEMPORARY``), comments allowed (gh-ost writes some)."""
    words = strip_comments(statement).split(None, 4)
    upper = [w.upper() for w in words[:4]]
    return upper[:1] == ["CREATE"] and "TABLE" in upper[1:4] and "TEMPORARY" not in upper
