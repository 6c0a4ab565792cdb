"""Mirror keys end to end: MariaDB binlog -> change log (the real pipeline) -> mirrors (Sail).

Tables without a primary key keep duplicate rows, a zero date inside a primary key does not
collapse rows, column names with dots and backticks work, and two tables whose
``db.table`` spellings coincide get distinct mirrors.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from cdc_platform.config.instance import InstanceConfig
from cdc_platform.runtime import DestinationRuntime
from cdc_platform.sink.destination_lake import DestinationLake
from cdc_platform.sink.term import WriteTerm
from cdc_platform.spark.locations import mirror_root, mirror_uri, state_uri
from cdc_platform.spark.mirror import apply_changes
from cdc_platform.spark.target import MirrorTarget
from cdc_platform.testing.destinations import PASSWORD_ENV, instance_config
from tests.conftest import MariaDBDatabase

pytestmark = pytest.mark.integration


def instance(db: MariaDBDatabase) -> InstanceConfig:
    return instance_config(db.server, db.user.name, [rf"{re.escape(db.name)}.*"], server_id=2201)


def catch_up(db: MariaDBDatabase, uri: str) -> None:
    """Run the destination until it is idle: everything committed so far is in the log."""
    layout = DestinationLake.at(Path(uri).parent.parent, "d")  # uri: <lake>/d/changes
    summary = DestinationRuntime(WriteTerm("d", instance(db), layout)).run(
        exit_when_idle_seconds=1.5
    )
    assert summary.error is None, summary


def _text(value: Any) -> Any:
    """Dates as text: pymysql gives zero dates as text and valid ones as date objects."""
    return value if value is None or isinstance(value, int | bytes) else str(value)


def source_bag(db: MariaDBDatabase, database: str, table: str) -> Counter[tuple[Any, ...]]:
    quoted = "`" + table.replace("`", "``") + "`"
    rows = db.server.query(f"SELECT * FROM {quoted}", database=database)
    return Counter(tuple(_text(v) for v in r) for r in rows)


def mirror_bag(spark: SparkSession, uri: str) -> Counter[tuple[Any, ...]]:
    rows = spark.read.format("delta").load(uri).collect()
    return Counter(tuple(_text(v) for v in r) for r in rows)


@pytest.fixture
def setup(
    mariadb: MariaDBDatabase, lake_root: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[str, str]:
    """(change-log uri, mirror root); the destination's start position is pinned."""
    monkeypatch.setenv(PASSWORD_ENV, mariadb.user.password)
    uri = DestinationLake.at(lake_root, "d").change_log
    catch_up(mariadb, uri)
    return uri, mirror_root(lake_root, "d")


def test_table_without_primary_key_keeps_duplicate_rows(
    spark: SparkSession, mariadb: MariaDBDatabase, setup: tuple[str, str]
) -> None:
    uri, root = setup
    name = mariadb.name
    mariadb.server.execute(
        "CREATE TABLE logs (a INT, b VARCHAR(10), c DATE)",
        "INSERT INTO logs VALUES (1, 'x', NULL), (1, 'x', NULL), (2, 'y', '2024-01-01'), "
        "(3, NULL, NULL)",
        database=name,
    )
    catch_up(mariadb, uri)
    first = apply_changes(spark, MirrorTarget(uri, root, name, "logs"))
    assert (first.mode, first.mirror_rows) == ("rebuild", 4)
    assert mirror_bag(spark, mirror_uri(root, name, "logs")) == source_bag(mariadb, name, "logs")

    steps = [
        [
            "DELETE FROM logs WHERE a = 1 LIMIT 1",  # one of two identical rows
            "UPDATE logs SET b = 'z' WHERE a = 2",
            "INSERT INTO logs VALUES (3, NULL, NULL), (4, 'w', NULL)",
        ],
        ["DELETE FROM logs WHERE a = 3", "INSERT INTO logs VALUES (1, 'x', NULL)"],
        ["UPDATE logs SET a = 5 WHERE a = 1", "INSERT INTO logs VALUES (5, 'x', NULL)"],
    ]
    crash_at = [None, "mirror_committed", "computed"]
    for statements, at in zip(steps, crash_at, strict=True):
        mariadb.server.execute(*statements, database=name)
        catch_up(mariadb, uri)
        if at is not None:

            def crash(step: str, at: str = at) -> None:
                if step == at:
                    raise RuntimeError(f"simulated crash at {step}")

            with pytest.raises(RuntimeError, match="simulated crash"):
                apply_changes(spark, MirrorTarget(uri, root, name, "logs"), hook=crash)
        result = apply_changes(spark, MirrorTarget(uri, root, name, "logs"))
        want = source_bag(mariadb, name, "logs")
        assert mirror_bag(spark, mirror_uri(root, name, "logs")) == want, statements
        assert result.mirror_rows == sum(want.values())
    assert source_bag(mariadb, name, "logs")[(5, "x", None)] == 3
    assert apply_changes(spark, MirrorTarget(uri, root, name, "logs")).mode == "noop"


def test_zero_dates_in_a_primary_key_keep_rows_apart(
    spark: SparkSession, mariadb: MariaDBDatabase, setup: tuple[str, str]
) -> None:
    uri, root = setup
    name = mariadb.name
    lax = "SET SESSION sql_mode = ''"  # allows zero and partial dates
    mariadb.server.execute(
        lax,
        "CREATE TABLE zd (d DATE NOT NULL, n INT NOT NULL, v INT, PRIMARY KEY (d, n))",
        "INSERT INTO zd VALUES ('0000-00-00', 1, 1), ('2026-00-15', 1, 2), "
        "('2026-03-00', 1, 3), ('2024-01-01', 1, 4), ('0000-00-00', 2, 5)",
        database=name,
    )
    catch_up(mariadb, uri)
    first = apply_changes(spark, MirrorTarget(uri, root, name, "zd"))
    assert first.mirror_rows == 5
    assert mirror_bag(spark, mirror_uri(root, name, "zd")) == source_bag(mariadb, name, "zd")
    mariadb.server.execute(
        lax,
        "UPDATE zd SET v = 10 WHERE d = '0000-00-00' AND n = 1",
        "DELETE FROM zd WHERE d = '2026-03-00'",
        "UPDATE zd SET n = 7 WHERE d = '2026-00-15'",
        "INSERT INTO zd VALUES ('2026-03-00', 9, 9)",
        database=name,
    )
    catch_up(mariadb, uri)
    second = apply_changes(spark, MirrorTarget(uri, root, name, "zd"))
    assert second.mode == "merge"
    assert mirror_bag(spark, mirror_uri(root, name, "zd")) == source_bag(mariadb, name, "zd")
    assert second.mirror_rows == 5


def test_column_and_table_names_with_dots_and_backticks(
    spark: SparkSession, mariadb: MariaDBDatabase, setup: tuple[str, str]
) -> None:
    uri, root = setup
    name = mariadb.name
    mariadb.server.execute(
        "CREATE TABLE `odd``t.x é?` (`id.x` INT PRIMARY KEY, `a``b` VARCHAR(10), `c.d` INT)",
        "CREATE TABLE `k.less` (`x.y` INT, `p``q` VARCHAR(5))",
        "INSERT INTO `odd``t.x é?` VALUES (1, 'one', 10), (2, 'two', 20), (3, 'three', 30)",
        "INSERT INTO `k.less` VALUES (1, 'a'), (1, 'a'), (2, NULL)",
        database=name,
    )
    catch_up(mariadb, uri)
    for table in ("odd`t.x é?", "k.less"):
        result = apply_changes(spark, MirrorTarget(uri, root, name, table))
        assert result.mode == "rebuild"
        assert mirror_bag(spark, mirror_uri(root, name, table)) == source_bag(mariadb, name, table)
        assert (Path(mirror_uri(root, name, table)) / "_delta_log").is_dir(), "where it says"
    assert not (Path(root) / "_delta_log").exists()
    frame = spark.read.format("delta").load(mirror_uri(root, name, "odd`t.x é?"))
    assert frame.columns == ["id.x", "a`b", "c.d"]
    mariadb.server.execute(
        "UPDATE `odd``t.x é?` SET `a``b` = 'uno', `c.d` = 11 WHERE `id.x` = 1",
        "UPDATE `odd``t.x é?` SET `id.x` = 22 WHERE `id.x` = 2",
        "DELETE FROM `odd``t.x é?` WHERE `id.x` = 3",
        "UPDATE `k.less` SET `p``q` = 'b' WHERE `x.y` = 2",
        "DELETE FROM `k.less` WHERE `x.y` = 1 LIMIT 1",
        database=name,
    )
    catch_up(mariadb, uri)
    for table in ("odd`t.x é?", "k.less"):
        result = apply_changes(spark, MirrorTarget(uri, root, name, table))
        assert result.mode == "merge"
        assert mirror_bag(spark, mirror_uri(root, name, table)) == source_bag(mariadb, name, table)


def test_mirror_locations_of_look_alike_names_are_distinct(
    spark: SparkSession, mariadb: MariaDBDatabase, setup: tuple[str, str]
) -> None:
    uri, root = setup
    name = mariadb.name
    other = f"{name}.a"  # database `<name>.a` + table `b` vs database `<name>` + table `a.b`
    assert mirror_uri(root, "shop", "items") == f"{root}/shop.items", "simple names unchanged"
    assert mirror_uri(root, other, "b") != mirror_uri(root, name, "a.b")
    assert state_uri(root, other, "b") != state_uri(root, name, "a.b")
    mariadb.server.execute(f"CREATE DATABASE `{other}`")
    try:
        mariadb.server.execute(
            "CREATE TABLE `a.b` (id INT PRIMARY KEY, v VARCHAR(10))",
            "INSERT INTO `a.b` VALUES (1, 'plain db'), (2, 'plain db')",
            database=name,
        )
        mariadb.server.execute(
            "CREATE TABLE b (id INT PRIMARY KEY, v VARCHAR(10))",
            "INSERT INTO b VALUES (1, 'dotted db'), (3, 'dotted db')",
            database=other,
        )
        catch_up(mariadb, uri)
        for db, table in ((name, "a.b"), (other, "b")):
            apply_changes(spark, MirrorTarget(uri, root, db, table))
        mariadb.server.execute("UPDATE b SET v = 'changed' WHERE id = 1", database=other)
        catch_up(mariadb, uri)
        for db, table in ((name, "a.b"), (other, "b")):
            apply_changes(spark, MirrorTarget(uri, root, db, table))
            assert mirror_bag(spark, mirror_uri(root, db, table)) == source_bag(
                mariadb, db, table
            ), (db, table)
    finally:
        mariadb.server.execute(f"DROP DATABASE IF EXISTS `{other}`")
