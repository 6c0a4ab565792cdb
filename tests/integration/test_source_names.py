"""Any name MySQL allows, end to end: MariaDB binlog -> change log -> mirrors (Sail) -> reconcile.

Column names equal to the engine's own (``pk``, ``_cdc_seq``, ``op``...) and table, database
and column names with quotes, backticks, ``|``, ``@``, ``$``, brackets, spaces, dots, dashes,
non-ASCII letters and names differing only in case: every mirror equals its source, value by
value, and the reconciliation compares every table and finds it clean.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from cdc_platform.config import ConfigSet, load_config
from cdc_platform.reconcile.service import reconcile_destination
from cdc_platform.runtime import DestinationRuntime
from cdc_platform.sink.destination_lake import DestinationLake
from cdc_platform.sink.term import WriteTerm
from cdc_platform.spark.locations import mirror_root, mirror_uri
from cdc_platform.spark.mirror import apply_changes
from cdc_platform.spark.target import MirrorTarget
from cdc_platform.testing.destinations import PASSWORD_ENV, write_conf
from cdc_platform.testing.ha import fast_database_lease
from tests.conftest import MariaDBDatabase

pytestmark = pytest.mark.integration

ENGINE_LIKE = [
    "key",
    "op",
    "seq",
    "columns",
    "after",
    "before",
    "e",
    "_last",
    "_before_pk",
    "_k_pk",
    "_cdc_deleted",
    "_CDC_SEQ",
    "_cdc_kind",
    "_cdc_first_kind",
    "_cdc_hash",
    "_cdc_chunk",
    "_cdc_delta",
    "_cdc_hit",
    "_cdc_copy",
]
"""Names the engine used (or uses) for columns of its own beside the table's."""

ODD_TABLES = [
    "it's",
    'say "hi"',
    "back`tick",
    "p|q@r$s",
    "[br]",
    "sp ace",
    "do.t",
    "da-sh",
    "ünïcödé",
    "Case",
    "case",
    "%?#",
]
ODD_COLUMNS = ["i`d", "v.a", "w x", "ü|@$[]", "'q'", "-"]


def q(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


@pytest.fixture
def destination(
    mariadb: MariaDBDatabase, lake_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> ConfigSet:
    monkeypatch.setenv(PASSWORD_ENV, mariadb.user.password)
    conf = tmp_path / "conf"
    write_conf(
        conf,
        destination="d",
        server=mariadb.server,
        user=mariadb.user,
        database=mariadb.name,
        lake_root=lake_root,
        server_id=3301,
        extra_platform=fast_database_lease(f"sqlite:///{tmp_path}/lease.db")
        + "reconcile: {chunk_size: 3}\n",
    )
    config = load_config(conf)
    assert not config.errors, config.errors
    catch_up(config)
    return config


def catch_up(config: ConfigSet) -> None:
    summary = DestinationRuntime(
        WriteTerm("d", config.destinations["d"].config, DestinationLake.of(config, "d"))
    ).run(exit_when_idle_seconds=1.5)
    assert summary.error is None, summary


def _plain(value: Any) -> Any:
    return value if value is None or isinstance(value, int | bytes) else str(value)


def source_bag(db: MariaDBDatabase, database: str, table: str) -> Counter[tuple[Any, ...]]:
    rows = db.server.query(f"SELECT * FROM {q(database)}.{q(table)}")
    return Counter(tuple(_plain(v) for v in r) for r in rows)


def mirror_bag(spark: SparkSession, uri: str) -> Counter[tuple[Any, ...]]:
    rows = spark.read.format("delta").load(uri).collect()
    return Counter(tuple(_plain(v) for v in r) for r in rows)


def assert_mirrors_equal_sources(
    spark: SparkSession, config: ConfigSet, db: MariaDBDatabase, tables: list[tuple[str, str]]
) -> None:
    root = mirror_root(config.lake_root, "d")
    for database, table in tables:
        apply_changes(
            spark, MirrorTarget(DestinationLake.of(config, "d").change_log, root, database, table)
        )
        got = mirror_bag(spark, mirror_uri(root, database, table))
        assert got == source_bag(db, database, table), (database, table)


def test_columns_named_like_the_engines_own_mirror_and_reconcile(
    spark: SparkSession, destination: ConfigSet, mariadb: MariaDBDatabase
) -> None:
    extra = ", ".join(f"{q(n)} INT" for n in ENGINE_LIKE)
    mariadb.server.execute(
        f"CREATE TABLE keyed (pk INT PRIMARY KEY, {extra})",
        f"CREATE TABLE bag (pk INT, {extra})",
        database=mariadb.name,
    )
    width = len(ENGINE_LIKE)
    for table in ("keyed", "bag"):
        values = ", ".join(
            "(" + ", ".join(str(i * 100 + j) for j in range(width + 1)) + ")" for i in range(8)
        )
        mariadb.server.execute(f"INSERT INTO {table} VALUES {values}", database=mariadb.name)
    mariadb.server.execute(
        "INSERT INTO bag SELECT * FROM bag WHERE pk < 200", database=mariadb.name
    )
    catch_up(destination)
    tables = [(mariadb.name, "keyed"), (mariadb.name, "bag")]
    assert_mirrors_equal_sources(spark, destination, mariadb, tables)  # rebuilds
    for table in ("keyed", "bag"):
        mariadb.server.execute(
            f"UPDATE {table} SET `_cdc_seq` = -1, `key` = NULL WHERE pk = 300",
            f"UPDATE {table} SET pk = 900 WHERE pk = 400",
            f"DELETE FROM {table} WHERE pk = 500",
            database=mariadb.name,
        )
    mariadb.server.execute("DELETE FROM bag WHERE pk = 100 LIMIT 1", database=mariadb.name)
    catch_up(destination)
    assert_mirrors_equal_sources(spark, destination, mariadb, tables)  # merges
    report = reconcile_destination(destination, "d", spark)
    assert report.status == "clean", report.metadata()
    assert {t.table: (t.status, t.source_rows) for t in report.tables} == {
        "keyed": ("compared", 7),
        "bag": ("compared", 8),
    }


def test_any_table_and_column_name_mirror_and_reconcile(
    spark: SparkSession, destination: ConfigSet, mariadb: MariaDBDatabase
) -> None:
    other = f"{mariadb.name}.ö b-"  # a database name with a dot, a space, a dash, non-ASCII
    mariadb.server.execute(f"CREATE DATABASE {q(other)}")
    try:
        columns = ", ".join(f"{q(c)} VARCHAR(20)" for c in ODD_COLUMNS)
        tables = [(mariadb.name, t) for t in ODD_TABLES] + [(other, t) for t in ODD_TABLES[:3]]
        for n, (database, table) in enumerate(tables):
            key = "PRIMARY KEY" if table != "[br]" else ""  # one keyless table
            mariadb.server.execute(
                f"CREATE TABLE {q(database)}.{q(table)} (id INT {key}, {columns})",
                f"INSERT INTO {q(database)}.{q(table)} VALUES "
                + ", ".join(
                    f"({i}, " + ", ".join(f"'t{n}ü{i}{j}'" for j in range(len(ODD_COLUMNS))) + ")"
                    for i in range(5)
                ),
            )
        catch_up(destination)
        assert_mirrors_equal_sources(spark, destination, mariadb, tables)
        for database, table in tables:
            mariadb.server.execute(
                f"UPDATE {q(database)}.{q(table)} SET {q('w x')} = 'changed' WHERE id = 1",
                f"DELETE FROM {q(database)}.{q(table)} WHERE id = 2",
            )
        catch_up(destination)
        assert_mirrors_equal_sources(spark, destination, mariadb, tables)
        uris = {mirror_uri(mirror_root(destination.lake_root, "d"), *t) for t in tables}
        assert len(uris) == len(tables)  # `Case` and `case`, db `x.y` + t and db x + `y.t`
        report = reconcile_destination(destination, "d", spark)
        assert report.status == "clean", report.metadata()
        assert report.skipped_tables == {}
        compared = {(t.db, t.table): (t.status, t.source_rows) for t in report.tables}
        assert compared == dict.fromkeys(tables, ("compared", 4))
    finally:
        mariadb.server.execute(f"DROP DATABASE IF EXISTS {q(other)}")
