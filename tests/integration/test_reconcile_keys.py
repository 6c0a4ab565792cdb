"""Reconciliation of tables without a primary key, and the bound on what reaches the driver.

Real MariaDB (binlog), real Delta change log, real mirrors built by Spark (Sail).
"""

from __future__ import annotations

from typing import Any

import pytest
from pyspark.sql import SparkSession

from cdc_platform.config import ConfigSet
from cdc_platform.reconcile.compare import compare_table
from cdc_platform.reconcile.comparison import ComparisonBounds
from cdc_platform.reconcile.service import reconcile_destination
from cdc_platform.sink.destination_lake import DestinationLake
from cdc_platform.source.mysql import connect_source
from cdc_platform.source.reading.table_description import describe_table
from cdc_platform.spark.locations import mirror_root, mirror_uri
from cdc_platform.spark.mirror import apply_changes
from cdc_platform.spark.target import MirrorTarget
from tests.conftest import MariaDBDatabase
from tests.integration.test_reconcile import apply_mirrors, catch_up, destination

pytestmark = pytest.mark.integration

__all__ = ["destination"]  # the fixture, shared with test_reconcile


def test_differences_reach_the_driver_only_up_to_max_suspects(
    spark: SparkSession,
    destination: ConfigSet,
    mariadb: MariaDBDatabase,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    apply_mirrors(spark, destination, mariadb.name)
    root = mirror_root(destination.lake_root, "d")
    spark.sql(f"DELETE FROM delta.`{mirror_uri(root, mariadb.name, 'items')}` WHERE id <= 300")
    spark.sql(
        f"UPDATE delta.`{mirror_uri(root, mariadb.name, 'items')}` SET qty = -1 "
        "WHERE id > 1000 AND id <= 1050"
    )
    frame_type: Any = type(spark.range(1))
    original = frame_type.collect
    sizes: list[int] = []

    def counting_collect(self: Any) -> Any:
        rows = original(self)
        sizes.append(len(rows))
        return rows

    monkeypatch.setattr(frame_type, "collect", counting_collect)
    conn = connect_source(destination.destinations["d"].config.source, purpose="test")
    try:
        spec = describe_table(conn, mariadb.name, "items")
        result = compare_table(
            spark,
            conn,
            spec,
            lake=DestinationLake.of(destination, "d"),
            bounds=ComparisonBounds(chunk_size=400, max_suspects=10),
        )
    finally:
        conn.close()
    assert (result.missing_in_mirror, result.changed, result.extra_in_mirror) == (300, 50, 0)
    assert len(result.suspects) == 10
    assert "350 rows differ" in result.message
    assert max(sizes) <= 10, f"rows collected per query: {sizes}"


def test_table_without_primary_key_is_compared_as_a_multiset(
    spark: SparkSession, destination: ConfigSet, mariadb: MariaDBDatabase
) -> None:
    name = mariadb.name
    mariadb.server.execute(
        "CREATE TABLE bag (a INT, b VARCHAR(5), c DATE)",
        "INSERT INTO bag VALUES (1, 'x', NULL), (1, 'x', NULL), (2, 'y', '2024-01-01'), "
        "(2, 'y', '2024-01-01'), (3, NULL, NULL)",
        database=name,
    )
    catch_up(destination)
    root = mirror_root(destination.lake_root, "d")
    apply_mirrors(spark, destination, name)
    apply_changes(
        spark, MirrorTarget(DestinationLake.of(destination, "d").change_log, root, name, "bag")
    )
    clean = reconcile_destination(destination, "d", spark)
    assert f"{name}.bag" not in clean.skipped_tables, clean.skipped_tables
    bag = next(t for t in clean.tables if t.table == "bag")
    assert (bag.status, bag.source_rows, bag.mirror_rows, bag.differences) == ("compared", 5, 5, 0)
    assert clean.status == "clean", clean.metadata()

    mariadb.server.execute(
        "SET sql_log_bin = 0",
        "INSERT INTO bag VALUES (1, 'x', NULL)",  # a third copy the binlog never saw
        "DELETE FROM bag WHERE a = 3",
        database=name,
    )
    spark.sql(f"DELETE FROM delta.`{mirror_uri(root, name, 'bag')}` WHERE a = 2")  # both copies
    report = reconcile_destination(destination, "d", spark)
    bag = next(t for t in report.tables if t.table == "bag")
    assert (bag.missing_in_mirror, bag.changed, bag.extra_in_mirror) == (3, 0, 1)
    assert report.status == "not_repaired", report.metadata()
    assert "no primary key" in report.message
