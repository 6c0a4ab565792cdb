"""What the default start (`initial`) copies: every captured table, empty or keyless.

Real MariaDB (binlog), the real destination run with its initial snapshot, real Delta
change log, mirrors built by Spark (Sail): each mirror equals its source, value by value.
"""

from __future__ import annotations

import re
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from cdc_platform.backfill.new_tables import snapshot_new_tables
from cdc_platform.config import load_config
from cdc_platform.config.instance import InstanceConfig
from cdc_platform.config.start import StartConfig
from cdc_platform.runtime import DestinationRuntime
from cdc_platform.runtime.supervised import supervised_destination
from cdc_platform.sink.destination_lake import DestinationLake
from cdc_platform.sink.term import WriteTerm
from cdc_platform.spark.locations import mirror_root, mirror_uri
from cdc_platform.spark.mirror import apply_changes
from cdc_platform.spark.target import MirrorTarget
from cdc_platform.testing.destinations import (
    PASSWORD_ENV,
    instance_config,
    sqlite_lease,
    write_conf,
)
from tests.conftest import MariaDBDatabase

pytestmark = pytest.mark.integration


def instance(db: MariaDBDatabase) -> InstanceConfig:
    return instance_config(
        db.server,
        db.user.name,
        [rf"{re.escape(db.name)}\..*"],
        server_id=3401,
        start=StartConfig(mode="initial"),
    )


def catch_up(db: MariaDBDatabase, lake_root: Path) -> str:
    """What the lease holder does at each term's start (copy the tables it has no copy of,
    `start: initial`), then stream until idle; returns the change log's uri."""
    layout = DestinationLake.at(lake_root, "d")
    uri = layout.change_log
    snapshot_new_tables(WriteTerm("d", instance(db), layout))
    summary = DestinationRuntime(WriteTerm("d", instance(db), layout)).run(
        exit_when_idle_seconds=1.5
    )
    assert summary.error is None, summary
    return uri


def _plain(value: Any) -> Any:
    return value if value is None or isinstance(value, int | bytes) else str(value)


def source_bag(db: MariaDBDatabase, table: str) -> Counter[tuple[Any, ...]]:
    rows = db.server.query(f"SELECT * FROM `{table}`", database=db.name)
    return Counter(tuple(_plain(v) for v in r) for r in rows)


def mirror_bag(spark: SparkSession, uri: str) -> Counter[tuple[Any, ...]]:
    return Counter(
        tuple(_plain(v) for v in r) for r in spark.read.format("delta").load(uri).collect()
    )


def test_tables_empty_at_the_start_get_empty_mirrors(
    spark: SparkSession, mariadb: MariaDBDatabase, lake_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(PASSWORD_ENV, mariadb.user.password)
    mariadb.server.execute(
        "CREATE TABLE empty_keyed (id INT PRIMARY KEY, `v w` VARCHAR(10), d DATE)",
        "CREATE TABLE full_keyed (id INT PRIMARY KEY, v VARCHAR(10))",
        "INSERT INTO full_keyed VALUES (1, 'a'), (2, 'b')",
        database=mariadb.name,
    )
    uri = catch_up(mariadb, lake_root)
    root = mirror_root(lake_root, "d")
    result = apply_changes(spark, MirrorTarget(uri, root, mariadb.name, "empty_keyed"))
    assert (result.mode, result.mirror_rows, result.columns) == ("rebuild", 0, ("id", "v w", "d"))
    mirror = spark.read.format("delta").load(mirror_uri(root, mariadb.name, "empty_keyed"))
    assert [(f.name, f.dataType.simpleString()) for f in mirror.schema.fields] == [
        ("id", "int"),
        ("v w", "string"),
        ("d", "string"),  # zero_dates: string (the default)
    ]
    assert mirror.count() == 0
    assert (
        apply_changes(spark, MirrorTarget(uri, root, mariadb.name, "full_keyed")).mirror_rows == 2
    )

    mariadb.server.execute("INSERT INTO empty_keyed VALUES (7, 'x', NULL)", database=mariadb.name)
    catch_up(mariadb, lake_root)
    assert (
        apply_changes(spark, MirrorTarget(uri, root, mariadb.name, "empty_keyed")).mirror_rows == 1
    )
    got = mirror_bag(spark, mirror_uri(root, mariadb.name, "empty_keyed"))
    assert got == source_bag(mariadb, "empty_keyed")


def test_keyless_tables_are_copied_whole_and_reread_after_ddl(
    spark: SparkSession,
    mariadb: MariaDBDatabase,
    lake_root: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Tables without a primary key, duplicates included: the initial snapshot copies them
    (one consistent read, the stream merged after its binlog place), writes going on during
    the copy are counted once, and a DDL that rewrites their rows is followed by a copy that
    replaces the mirror (old rows then match later deletes)."""
    monkeypatch.setenv(PASSWORD_ENV, mariadb.user.password)
    server, db = mariadb.server, mariadb.name
    conf = tmp_path / "conf"
    write_conf(
        conf,
        destination="d",
        server=server,
        user=mariadb.user,
        database=db,
        lake_root=lake_root,
        server_id=3402,
        extra_platform=sqlite_lease(tmp_path),
        start="{mode: initial}",
    )
    config = load_config(conf)
    assert not config.errors, config.errors
    server.execute(
        "CREATE TABLE bag (a INT, b VARCHAR(10))",
        "CREATE TABLE logs (t VARCHAR(20), n INT)",  # keyless and empty
        "INSERT INTO bag VALUES " + ", ".join(f"({i % 7}, 'v{i % 3}')" for i in range(300)),
        database=db,
    )

    def run(during: list[str]) -> None:
        with supervised_destination(config, config.destinations["d"]) as supervisor:
            done = threading.Thread(
                target=lambda: supervisor.run(exit_when_idle_seconds=2.5), daemon=True
            )
            done.start()
            for statement in during:
                server.execute(statement, database=db)
            done.join(timeout=240)
            assert not done.is_alive()

    run(
        [
            "INSERT INTO bag VALUES (1, 'v1'), (100, 'new')",
            "DELETE FROM bag WHERE a = 2 LIMIT 3",
            "UPDATE bag SET b = 'u' WHERE a = 3 LIMIT 2",
            "INSERT INTO logs VALUES ('x', 1), ('x', 1)",
        ]
    )
    root = mirror_root(lake_root, "d")
    uri = DestinationLake.of(config, "d").change_log
    for table in ("bag", "logs"):
        apply_changes(spark, MirrorTarget(uri, root, db, table))
        assert mirror_bag(spark, mirror_uri(root, db, table)) == source_bag(mariadb, table), table

    run(
        [
            "ALTER TABLE bag ADD COLUMN c INT NOT NULL DEFAULT 7",  # rows rewritten: re-read
            "DELETE FROM bag WHERE a = 4 LIMIT 2",
            "UPDATE bag SET c = 8 WHERE a = 5 LIMIT 1",
        ]
    )
    assert (
        DestinationLake.at(lake_root, "d").reread_tables.read_json() is None
    )  # the re-read is done
    apply_changes(spark, MirrorTarget(uri, root, db, "bag"))
    assert mirror_bag(spark, mirror_uri(root, db, "bag")) == source_bag(mariadb, "bag")
