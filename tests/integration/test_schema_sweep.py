"""Sweep: a broad corpus of schemas, half before the destination starts and half while it
streams, then updates and deletes in every table; every mirror compared with its source.

Every type family with defaults, generated columns, charsets per column, partitioned tables,
``CREATE TABLE ... LIKE`` and ``... SELECT``, ``RENAME``, ``DROP DATABASE`` and re-create,
tables without a key, empty tables and odd names. The comparison is the reconciliation's:
the source read live (keyset reader, its own value encoder) against the mirror built from the
binlog, value by value through the mirror's typing, as a multiset for keyless tables. The
figure (tables exact / total) is printed; every table must be exact.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from cdc_platform.config import ConfigSet, load_config
from cdc_platform.reconcile.service import reconcile_destination
from cdc_platform.runtime.supervised import supervised_destination
from cdc_platform.sink.destination_lake import DestinationLake
from cdc_platform.spark.locations import mirror_root, mirror_tables
from cdc_platform.spark.mirror import apply_changes
from cdc_platform.spark.target import MirrorTarget
from cdc_platform.testing.destinations import PASSWORD_ENV, write_conf
from cdc_platform.testing.ha import fast_database_lease
from tests.conftest import MariaDBDatabase

pytestmark = pytest.mark.integration

ROWS = 12


def q(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


@dataclass(frozen=True)
class Table:
    """A table of the corpus: extra columns beside ``id`` (key unless ``keyless``) and ``n``
    (an INT every table has, for the generic updates and deletes), each with the SQL
    expression of its value for row ``seq``."""

    name: str
    columns: tuple[tuple[str, str, str], ...]  # (name, definition, value of `seq`)
    keyless: bool = False
    options: str = ""
    rows: int = ROWS

    def create(self) -> str:
        key = "" if self.keyless else " PRIMARY KEY"
        cols = ", ".join(f"{q(c)} {d}" for c, d, _ in self.columns)
        body = f"id INT{key}, n INT" + (f", {cols}" if cols else "")
        return f"CREATE TABLE {q(self.name)} ({body}) {self.options}"

    def fill(self) -> list[str]:
        if not self.rows:
            return []
        names = ", ".join(["id", "n", *[q(c) for c, _, v in self.columns if v]])
        values = ", ".join(["seq", "seq", *[v for _, _, v in self.columns if v]])
        copies = " UNION ALL SELECT CAST(seq AS SIGNED) FROM seq_1_to_3" if self.keyless else ""
        return [
            f"INSERT INTO {q(self.name)} ({names}) SELECT {values} "
            f"FROM (SELECT CAST(seq AS SIGNED) AS seq FROM seq_1_to_{self.rows}{copies}) s"
        ]


def corpus(prefix: str) -> list[Table]:
    """Every family once; ``prefix`` makes the two halves distinct tables."""
    return [
        Table(
            f"{prefix}ints",
            (
                ("ti", "TINYINT NOT NULL DEFAULT -128", "seq - 100"),
                ("tu", "TINYINT UNSIGNED DEFAULT 255", ""),
                ("si", "SMALLINT DEFAULT 7", "seq * -300"),
                ("mi", "MEDIUMINT UNSIGNED NOT NULL DEFAULT 16777215", "seq * 1000"),
                ("bi", "BIGINT NOT NULL DEFAULT -9223372036854775808", "seq * 1000000007"),
                ("bu", "BIGINT UNSIGNED DEFAULT 18446744073709551615", ""),
                ("bo", "BOOL DEFAULT TRUE", "seq % 2"),
            ),
        ),
        Table(
            f"{prefix}nums",
            (
                ("d", "DECIMAL(65,30) DEFAULT -0.5", "seq / 7"),
                ("d2", "DECIMAL(10,2) NOT NULL DEFAULT 0", "seq * 1.25"),
                ("f", "FLOAT DEFAULT 1.1", "seq / 3"),
                ("g", "DOUBLE NOT NULL DEFAULT 3.141592653589793", "seq * 1e300 / 1e299"),
                ("b1", "BIT(1) DEFAULT b'1'", ""),
                ("b64", "BIT(64) NOT NULL DEFAULT b'1010'", "seq << 60"),
            ),
        ),
        Table(
            f"{prefix}times",
            (
                (
                    "d",
                    "DATE NOT NULL DEFAULT '0000-00-00'",
                    "IF(seq % 3 = 0, '2026-00-15', DATE_ADD('2024-02-28', INTERVAL seq DAY))",
                ),
                (
                    "dt",
                    "DATETIME(6) DEFAULT '2024-01-01 00:00:00.000001'",
                    "IF(seq % 4 = 0, '0000-00-00 01:00:00', "
                    "TIMESTAMPADD(SECOND, seq, '2024-12-31 23:59:00.5'))",
                ),
                ("ts", "TIMESTAMP(3) NULL DEFAULT '2024-06-01 08:30:00.250'", ""),
                ("tm", "TIME(2) DEFAULT '-838:59:59'", "SEC_TO_TIME(seq * -3601.25)"),
                ("y", "YEAR DEFAULT 2155", "IF(seq % 2, 0, 1901 + seq)"),
            ),
            options="",
        ),
        Table(
            f"{prefix}texts",
            (
                ("c", "CHAR(5) CHARACTER SET latin1 DEFAULT 'é'", "CONCAT('ç', seq)"),
                (
                    "v",
                    "VARCHAR(40) CHARACTER SET utf8mb4 COLLATE utf8mb4_uca1400_ai_ci DEFAULT '😀'",
                    "CONCAT('ünï ', seq, ' 😀')",
                ),
                ("t", "TEXT CHARACTER SET cp1250", "CONCAT('Ž', REPEAT('x', seq))"),
                ("u", "VARCHAR(10) CHARACTER SET ucs2", "CONCAT('ucs', seq)"),
                ("k", "VARCHAR(10) CHARACTER SET sjis DEFAULT 'ｱ'", ""),
                ("e", "ENUM('a','b','ç') DEFAULT 'ç'", "ELT(1 + seq % 3, 'a', 'b', 'ç')"),
                ("s", "SET('x','y','z') NOT NULL DEFAULT ''", "IF(seq % 2, 'x,z', '')"),
            ),
        ),
        Table(
            f"{prefix}bins",
            (
                ("b", "BINARY(4) DEFAULT X'00FF0000'", "IF(seq % 2, X'00000000', UNHEX('AB00'))"),
                ("vb", "VARBINARY(8)", "IF(seq % 3, X'', UNHEX(HEX(seq)))"),
                ("bl", "BLOB", "REPEAT(X'00FF', seq)"),
            ),
        ),
        Table(
            f"{prefix}docs",
            (
                (
                    "j",
                    "JSON DEFAULT '{}'",
                    "ELT(1 + seq % 4, 'null', '\"s\"', "
                    "'123456789012345678901234567890', '{\"a\": [1, 2.50]}')",
                ),
            ),
        ),
        Table(
            f"{prefix}logical",
            (
                ("u", "UUID DEFAULT '123e4567-e89b-12d3-a456-426614174000'", ""),
                ("i4", "INET4", "CONCAT('10.0.0.', seq)"),
                ("i6", "INET6 DEFAULT '::'", "CONCAT('::ffff:1.2.3.', seq)"),
                ("p", "POINT", "IF(seq % 2, ST_GeomFromText(CONCAT('POINT(', seq, ' 2)')), NULL)"),
            ),
        ),
        Table(
            f"{prefix}generated",
            (
                ("a", "INT DEFAULT 5", "seq * 2"),
                ("v", "INT AS (a + n) VIRTUAL", ""),
                ("s", "VARCHAR(20) AS (CONCAT('s', a)) STORED", ""),
            ),
        ),
        Table(
            f"{prefix}parts",
            (("v", "VARCHAR(10) DEFAULT 'p'", "CONCAT('p', seq)"),),
            options="PARTITION BY RANGE (id) (PARTITION p0 VALUES LESS THAN (6), "
            "PARTITION p1 VALUES LESS THAN MAXVALUE)",
        ),
        Table(
            f"{prefix}bag",
            (("v", "VARCHAR(10)", "CONCAT('b', seq % 4)"),),
            keyless=True,
        ),
        Table(f"{prefix}empty", (("v", "DATE NOT NULL", ""),), rows=0),
        Table(
            f"{prefix}o`dd.n|a@m$e [x] ü-",
            (
                ("c o`l.u|mn", "VARCHAR(10) DEFAULT 'x'", "CONCAT('o', seq)"),
                ("pk", "INT", "seq + 1"),
                ("_cdc_seq", "INT", "seq + 2"),
            ),
        ),
    ]


def derived(prefix: str, db: str) -> list[str]:
    """Tables made from others: LIKE, SELECT, RENAME (after the corpus exists)."""
    return [
        f"CREATE TABLE `{prefix}like` LIKE `{prefix}ints`",
        f"INSERT INTO `{prefix}like` SELECT * FROM `{prefix}ints`",
        f"CREATE TABLE `{prefix}selected` (PRIMARY KEY (id)) SELECT id, n, c, v FROM "
        f"`{prefix}texts`",
        f"CREATE TABLE `{prefix}to_rename` (id INT PRIMARY KEY, n INT)",
        f"INSERT INTO `{prefix}to_rename` SELECT seq, seq FROM seq_1_to_5",
        f"RENAME TABLE `{prefix}to_rename` TO `{prefix}renamed`",
        f"CREATE TABLE `{db}_sub`.`{prefix}in_sub` (id INT PRIMARY KEY, n INT, v VARCHAR(5))",
        f"INSERT INTO `{db}_sub`.`{prefix}in_sub` SELECT seq, seq, 'x' FROM seq_1_to_4",
    ]


def changes(table: str) -> list[str]:
    """Updates and deletes every table gets (``n`` and ``id`` exist everywhere)."""
    return [
        f"UPDATE {q(table)} SET n = n + 100 WHERE id % 3 = 0",
        f"DELETE FROM {q(table)} WHERE id % 5 = 1",
        f"UPDATE {q(table)} SET id = id + 1000 WHERE id = 2",
        f"INSERT INTO {q(table)} (id, n) VALUES (5000, 1)",
    ]


@pytest.fixture
def config(
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
        server_id=3601,
        extra_platform=fast_database_lease(f"sqlite:///{tmp_path}/l.db")
        + "reconcile: {chunk_size: 5}\n",
        start="{mode: initial}",
    )
    instance = conf / "destinations" / "d" / "instance.yaml"
    db = mariadb.name
    instance.write_text(instance.read_text().replace(f"['{db}\\..*']", f"['{db}(_sub)?\\..*']"))
    loaded = load_config(conf)
    assert not loaded.errors, loaded.errors
    return loaded


def test_sweep_every_mirror_equals_its_source(
    spark: SparkSession, config: ConfigSet, mariadb: MariaDBDatabase
) -> None:
    server, db = mariadb.server, mariadb.name
    lax = "SET SESSION sql_mode = ''"  # zero and partial dates, as production data has them

    def run(during: list[str]) -> None:
        with supervised_destination(config, config.destinations["d"]) as supervisor:
            done = threading.Thread(
                target=lambda: supervisor.run(exit_when_idle_seconds=3.0), daemon=True
            )
            done.start()
            for statement in during:
                server.execute(lax, statement, database=db)
            done.join(timeout=600)
            assert not done.is_alive()

    server.execute(f"DROP DATABASE IF EXISTS `{db}_sub`", f"CREATE DATABASE `{db}_sub`")
    try:
        before, during = corpus("a_"), corpus("b_")
        for table in before:
            server.execute(lax, table.create(), *table.fill(), database=db)
        server.execute(lax, *derived("a_", db), database=db)
        streamed = [s for t in during for s in (t.create(), *t.fill())]
        streamed += derived("b_", db)
        streamed += [  # drop the sub database while streaming and make it again
            f"DROP DATABASE `{db}_sub`",
            f"CREATE DATABASE `{db}_sub`",
            f"CREATE TABLE `{db}_sub`.again (id INT PRIMARY KEY, n INT)",
            f"INSERT INTO `{db}_sub`.again VALUES (1, 1), (2, 2)",
        ]
        run(streamed)  # the first half is copied by the initial snapshot meanwhile

        names = [t.name for t in [*before, *during]] + [
            f"{p}{n}" for p in ("a_", "b_") for n in ("like", "selected", "renamed")
        ]
        run([s for name in names for s in changes(name)])

        root = mirror_root(config.lake_root, "d")
        uri = DestinationLake.of(config, "d").change_log
        for mirror_db, table in mirror_tables(spark, uri):
            apply_changes(spark, MirrorTarget(uri, root, mirror_db, table))
        report = reconcile_destination(config, "d", spark)
        found = {(t.db, t.table): t for t in report.tables}
        exact = sorted(n for n, t in found.items() if t.status == "compared" and not t.differences)
        wrong = {f"{n[0]}.{n[1]}": t.summary() for n, t in found.items() if n not in set(exact)}
        print(f"\nsweep: {len(exact)} / {len(found)} tables exact; skipped {report.skipped_tables}")
        assert not wrong, wrong
        assert report.skipped_tables == {}
        expected = {(db, n) for n in names} | {(f"{db}_sub", "again")}
        assert set(found) == expected  # the dropped database's tables are gone at the source
        assert sum(t.source_rows for t in found.values()) > 0
    finally:
        server.execute(f"DROP DATABASE IF EXISTS `{db}_sub`")
