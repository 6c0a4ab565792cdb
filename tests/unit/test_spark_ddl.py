"""The DDL the mirrors follow: column renames, drops, adds, type changes, resets."""

from __future__ import annotations

import pytest

from cdc_platform.source.stream.ddl_effects import Effect
from cdc_platform.spark.ddl import (
    AddColumn,
    DropColumn,
    ModifyColumn,
    RenameColumn,
    apply_clauses,
    column_spec,
    create_table_schema,
    creates_table,
    dropped_reason,
    is_reset,
    parse_alter,
    renames,
    table_effect,
)
from cdc_platform.spark.types import ColumnSpec, TableSchema

pytestmark = pytest.mark.unit


def test_alter_clauses_in_their_common_spellings() -> None:
    clauses = parse_alter(
        "ALTER TABLE `shop`.`t` ADD COLUMN `price` DECIMAL(10,2) NOT NULL DEFAULT '0.00' AFTER id, "
        "DROP COLUMN IF EXISTS old, RENAME COLUMN a TO `b c`, CHANGE `x` y BIGINT UNSIGNED, "
        "MODIFY z VARCHAR(20), ADD INDEX ix (a), DROP PRIMARY KEY, ADD CONSTRAINT c CHECK (a > 0)"
    )
    assert clauses == [
        AddColumn("price", ColumnSpec("price", "decimal", precision=10, scale=2), after="id"),
        DropColumn("old"),
        RenameColumn("a", "b c"),
        RenameColumn("x", "y", ColumnSpec("y", "bigint", unsigned=True)),
        ModifyColumn("z", ColumnSpec("z", "varchar", length=20)),
    ]
    assert parse_alter("alter online table t add note longtext first") == [
        AddColumn("note", ColumnSpec("note", "text"), first=True)
    ]
    assert parse_alter("ALTER TABLE t ADD c INT COMMENT 'a, b'") == [
        AddColumn("c", ColumnSpec("c", "int"))
    ]
    assert parse_alter("CREATE INDEX i ON t (a)") == []
    assert renames("ALTER TABLE t RENAME COLUMN a TO b, CHANGE COLUMN c d INT") == [
        ("a", "b"),
        ("c", "d"),
    ]
    assert parse_alter("/* comment */ ALTER TABLE t DROP b -- trailing\n") == [DropColumn("b")]


def test_column_types_from_definitions() -> None:
    assert column_spec("e", "ENUM('a','it''s') NOT NULL") == ColumnSpec(
        "e", "enum", values=("a", "it's")
    )
    assert column_spec("d", "datetime(6)") == ColumnSpec("d", "datetime", scale=6)
    assert column_spec("b", "bit(10)") == ColumnSpec("b", "bit", length=10)
    assert column_spec("f", "double precision") == ColumnSpec("f", "double")
    assert column_spec("n", "int primary key") == ColumnSpec("n", "int", pk=True)
    assert column_spec("g", "GEOMETRY") == ColumnSpec("g", "geometry")
    assert column_spec("v", "VECTOR(3)") is None


def test_create_table_and_resets() -> None:
    schema = create_table_schema(
        "CREATE TABLE IF NOT EXISTS `t` (`a` INT NOT NULL, b VARCHAR(10), "
        "PRIMARY KEY (`a`), KEY kb (b)) ENGINE=InnoDB"
    )
    assert schema == TableSchema(
        (ColumnSpec("a", "int", pk=True), ColumnSpec("b", "varchar", length=10))
    )
    assert create_table_schema("CREATE TABLE t LIKE u") is None
    assert is_reset("TRUNCATE TABLE t")
    assert is_reset("truncate t")
    assert is_reset("DROP TABLE a, b")
    assert not is_reset("DROP INDEX i ON t")
    assert not is_reset("ALTER TABLE t DROP c")


def test_apply_clauses_follows_positions_and_keeps_the_key() -> None:
    schema = TableSchema(
        (ColumnSpec("id", "int", pk=True), ColumnSpec("a", "text"), ColumnSpec("b", "int"))
    )
    changed = apply_clauses(
        schema,
        parse_alter(
            "ALTER TABLE t ADD c INT AFTER id, DROP b, RENAME COLUMN a TO title, "
            "CHANGE id ident BIGINT, ADD v VECTOR(3)"
        ),
    )
    assert changed == TableSchema(
        (
            ColumnSpec("ident", "bigint", pk=True),
            ColumnSpec("c", "int"),
            ColumnSpec("title", "text"),
        )
    )


def _effect(sql: str, table: str, *, database_level: bool = False) -> tuple[Effect, str] | None:
    found = table_effect(sql, "shop", table, database_level=database_level)
    if found is None:
        return None
    return found.effect, dropped_reason(found) if found.effect is Effect.DROPPED else ""


def test_table_effects_as_a_mirror_reads_them() -> None:
    """Each DDL row is read for the table it is recorded under; a row naming no table (DROP
    DATABASE) concerns every table of its database."""
    assert _effect("RENAME TABLE a TO b", "a") == (Effect.DROPPED, "renamed to shop.b")
    assert _effect("RENAME TABLE a TO b", "b") == (Effect.REPLACED, "")
    assert _effect("DROP TABLE a, `b`", "b") == (Effect.DROPPED, "dropped")
    assert _effect("DROP TABLE a, `b`", "c") is None
    drop_db = "DROP DATABASE shop"
    assert _effect(drop_db, "t", database_level=True) == (Effect.DROPPED, "database dropped")
    assert _effect("DROP DATABASE other", "t", database_level=True) is None
    assert _effect(drop_db, "t") is None  # a row recorded under a table is that table's
    assert _effect("ALTER TABLE t TRUNCATE PARTITION p0", "t") == (Effect.REPLACED, "")
    assert _effect("ALTER TABLE t ADD c INT DEFAULT 1", "t") == (Effect.REREAD, "")
    assert creates_table("/* x */ CREATE OR REPLACE TABLE t (id INT)")
    assert not creates_table("CREATE TEMPORARY TABLE t (id INT)")
