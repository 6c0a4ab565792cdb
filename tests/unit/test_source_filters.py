"""Table filters and the classification of binlog statements."""

from __future__ import annotations

import pytest

from cdc_platform.source.filters import (
    Statement,
    StatementKind,
    TableFilter,
    classify_statement,
    statement_label,
)

pytestmark = pytest.mark.unit


def test_include_and_exclude_use_full_matches() -> None:
    f = TableFilter([r"shop\..*", r"crm\.customers"], [r"shop\.tmp_.*"])
    assert f.matches("shop", "orders")
    assert f.matches("crm", "customers")
    assert not f.matches("crm", "customers_old")  # full match, not search
    assert not f.matches("shop", "tmp_x")
    assert not f.matches("other", "orders")
    assert not f.matches("shopx", "orders")


def test_no_include_patterns_means_everything_but_system_schemas() -> None:
    f = TableFilter([], [])
    assert f.matches("any", "table")
    for schema in ("mysql", "information_schema", "performance_schema", "sys", "MySQL"):
        assert not f.matches(schema, "t")
    assert not TableFilter([r".*\..*"]).matches("mysql", "user")


def test_decisions_are_cached() -> None:
    f = TableFilter([r"a\..*"])
    assert f.matches("a", "t") is f.matches("a", "t") is True
    assert f.decided("a", "t")
    assert not f.decided("a", "u")


@pytest.mark.parametrize(
    ("include", "exclude", "db", "expected"),
    [
        ([r"shop\..*"], [], "shop", True),
        ([r"shop\.orders"], [], "shop", True),
        ([r"shop\..*"], [], "crm", False),
        ([r".*\.orders"], [], "crm", True),
        ([r"(shop|crm)\..*"], [], "crm", True),
        ([r"shop\..*"], [r"shop\..*"], "shop", False),
        ([r"shop\..*"], [r"shop\.tmp"], "shop", True),
        ([], [], "anything", True),
        ([], [], "mysql", False),
        ([r".*\..*"], [], "", False),
    ],
)
def test_database_level_decisions(
    include: list[str], exclude: list[str], db: str, expected: bool
) -> None:
    assert TableFilter(include, exclude).matches_database(db) is expected


# -- statements ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sql", "kind"),
    [
        ("BEGIN", StatementKind.BEGIN),
        ("START TRANSACTION", StatementKind.BEGIN),
        ("COMMIT", StatementKind.COMMIT),
        ("ROLLBACK", StatementKind.ROLLBACK),
        ("ROLLBACK TO SAVEPOINT `s1`", StatementKind.SAVEPOINT),
        ("ROLLBACK WORK TO s1", StatementKind.SAVEPOINT),
        ("SAVEPOINT `s1`", StatementKind.SAVEPOINT),
        ("RELEASE SAVEPOINT s1", StatementKind.SAVEPOINT),
        ("XA START 'x'", StatementKind.XA),
        ("GRANT SELECT ON p3.* TO 'cdc'@'%'", StatementKind.ADMIN),
        ("CREATE USER 'u'@'%' IDENTIFIED BY PASSWORD '*ABC'", StatementKind.ADMIN),
        ("DROP USER IF EXISTS 'u'@'%'", StatementKind.ADMIN),
        ("CREATE OR REPLACE ROLE r", StatementKind.ADMIN),
        ("FLUSH PRIVILEGES", StatementKind.ADMIN),
        ("ANALYZE TABLE t", StatementKind.ADMIN),
        ("", StatementKind.ADMIN),
        # Objects that hold no rows: their DDL changes no captured table.
        ("CREATE FUNCTION f() RETURNS INT RETURN 1", StatementKind.ADMIN),
        ("CREATE DEFINER=`root`@`%` PROCEDURE p() SELECT 1", StatementKind.ADMIN),
        ("CREATE OR REPLACE ALGORITHM=MERGE VIEW v AS SELECT 1", StatementKind.ADMIN),
        ("CREATE ALGORITHM = UNDEFINED DEFINER = `u`@`h` SQL SECURITY INVOKER VIEW v AS "
         "SELECT 1", StatementKind.ADMIN),
        ("/*!50001 DROP VIEW IF EXISTS `v` */", StatementKind.ADMIN),
        ("CREATE DEFINER=`root`@`%` TRIGGER tr BEFORE INSERT ON t FOR EACH ROW SET @x=1",
         StatementKind.ADMIN),
        ("DROP TRIGGER IF EXISTS tr", StatementKind.ADMIN),
        ("CREATE EVENT e ON SCHEDULE EVERY 1 DAY DO DELETE FROM t", StatementKind.ADMIN),
        ("CREATE AGGREGATE FUNCTION g(x INT) RETURNS INT BEGIN RETURN x; END",
         StatementKind.ADMIN),
    ],
)  # fmt: skip
def test_statement_kinds(sql: str, kind: StatementKind) -> None:
    assert classify_statement(sql, "db").kind is kind


@pytest.mark.parametrize(
    ("sql", "label"),
    [
        ("CREATE USER 'u'@'%' IDENTIFIED BY 'secret'", "CREATE USER"),
        ("alter user u identified by 'secret'", "ALTER USER"),
        ("SET PASSWORD FOR u = PASSWORD('secret')", "SET"),
        ("CREATE DEFINER=`root`@`%` TRIGGER tr BEFORE INSERT ON t FOR EACH ROW SET @x=1",
         "CREATE TRIGGER"),
        ("/*!50001 CREATE ALGORITHM=UNDEFINED VIEW `v` AS SELECT 1 */", "CREATE VIEW"),
        ("FLUSH PRIVILEGES", "FLUSH"),
        ("`odd` statement", "a statement"),
        ("", "a statement"),
    ],
)  # fmt: skip
def test_statement_labels_carry_the_verb_only(sql: str, label: str) -> None:
    """A log line names a statement by its verb: its text may carry a password."""
    assert statement_label(sql) == label


@pytest.mark.parametrize(
    ("sql", "tables"),
    [
        ("CREATE TABLE t (id INT)", [("db", "t")]),
        ("create table if not exists `o`.`my ``t``` (x int)", [("o", "my `t`")]),
        ("CREATE OR REPLACE TEMPORARY TABLE x.y LIKE z", [("x", "y")]),
        ("CREATE TABLE `p3`.`b` (\n  `id` int(11) NOT NULL\n)", [("p3", "b")]),
        ("ALTER TABLE t ADD COLUMN b INT", [("db", "t")]),
        ("ALTER ONLINE IGNORE TABLE s.t ENGINE=InnoDB", [("s", "t")]),
        ("ALTER TABLE t RENAME COLUMN a TO b", [("db", "t")]),
        ("ALTER TABLE t RENAME TO u", [("db", "t"), ("db", "u")]),
        ("ALTER TABLE t RENAME AS s2.u", [("db", "t"), ("s2", "u")]),
        ("ALTER TABLE t EXCHANGE PARTITION p WITH TABLE s2.u", [("db", "t"), ("s2", "u")]),
        ("ALTER TABLE t CONVERT PARTITION p TO TABLE u", [("db", "t"), ("db", "u")]),
        ("ALTER TABLE t CONVERT TABLE u TO PARTITION p VALUES IN (1)", [("db", "t"), ("db", "u")]),
        ("DROP TABLE `p3`.`a`,`p3`.`b` /* generated by server */", [("p3", "a"), ("p3", "b")]),
        ("DROP TABLE IF EXISTS t1, t2", [("db", "t1"), ("db", "t2")]),
        ("RENAME TABLE a TO b, x.c TO y.d", [("db", "a"), ("db", "b"), ("x", "c"), ("y", "d")]),
        ("TRUNCATE c", [("db", "c")]),
        ("TRUNCATE TABLE s.c", [("s", "c")]),
        ("CREATE UNIQUE INDEX i ON t (a)", [("db", "t")]),
        ("DROP INDEX IF EXISTS i ON s.t", [("s", "t")]),
        ("CREATE SEQUENCE s1", [("db", "s1")]),
        ("/* comment */ CREATE TABLE t2 (x int)", [("db", "t2")]),
        ("-- note\nDROP TABLE t3", [("db", "t3")]),
        # Executable comments are code the server runs (MySQL's /*! and MariaDB's /*M!).
        ("/*!100100 ALTER TABLE t MODIFY u UUID */", [("db", "t")]),
        ("/*M!100100 ALTER TABLE s.t ADD x INT*/", [("s", "t")]),
        ("/*!40000 ALTER TABLE `t4` DISABLE KEYS */", [("db", "t4")]),
        ("ALTER /* online */ TABLE t5 ADD y INT", [("db", "t5")]),
    ],
)  # fmt: skip
def test_ddl_tables(sql: str, tables: list[tuple[str, str]]) -> None:
    statement = classify_statement(sql, "db")
    assert statement.kind is StatementKind.DDL
    assert list(statement.tables) == tables


@pytest.mark.parametrize(
    ("sql", "db"),
    [
        ("CREATE DATABASE shop", "shop"),
        ("DROP SCHEMA IF EXISTS `old shop`", "old shop"),
        ("ALTER DATABASE CHARACTER SET utf8mb4", "db"),
    ],
)
def test_database_statements(sql: str, db: str) -> None:
    assert classify_statement(sql, "db") == Statement(
        StatementKind.DDL, database=db, database_level=True
    )


@pytest.mark.parametrize(
    ("sql", "tables"),
    [
        ("INSERT INTO t VALUES (1)", [("db", "t")]),
        ("INSERT IGNORE s.t (a) VALUES (1)", [("s", "t")]),
        ("REPLACE INTO t SELECT 1", [("db", "t")]),
        ("UPDATE LOW_PRIORITY t SET a = 1", [("db", "t")]),
        ("DELETE QUICK FROM s.t WHERE 1", [("s", "t")]),
        ("LOAD DATA INFILE 'f' INTO TABLE t", [("db", "t")]),
        ("UPDATE t1 JOIN t2 ON t1.a = t2.a SET t1.b = 1", []),
    ],
)
def test_statement_based_dml_targets(sql: str, tables: list[tuple[str, str]]) -> None:
    statement = classify_statement(sql, "db")
    assert statement.kind is StatementKind.DML
    assert list(statement.tables) == tables
