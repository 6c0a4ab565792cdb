"""FLOAT and DOUBLE primary keys through the reconciliation: a row the mirror lost or that
changed behind the binlog's back is repaired with the source's row, never deleted.

Real MariaDB (binlog), real Delta change log, real mirrors built by Spark (Sail). FLOAT is
single precision: a stored 1.1 is above the decimal 1.1 and not IN (1.1), so a lookup by
the value as text misses the row and the repair took it for a row the source had lost.
"""

from __future__ import annotations

from pathlib import Path

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
from cdc_platform.testing.destinations import PASSWORD_ENV, sqlite_lease, write_conf
from cdc_platform.testing.replay import replay
from tests.conftest import MariaDBDatabase

pytestmark = pytest.mark.integration

TABLES = {
    # the server prints FLOAT with 6 digits ('123457'); 1e-40 is subnormal
    "fk": ["-2.5", "0.1", "1.1", "123456.789", "1e-40", "3.4e38"],
    # the smallest subnormal and the largest double, as the progress file's Decimals they
    # would be written out in hundreds of digits
    "dk": ["-1.7976931348623157e308", "4.9e-324", "0.1", "1.1", "1e300"],
}


def _run(config: ConfigSet) -> None:
    term = WriteTerm("d", config.destinations["d"].config, DestinationLake.of(config, "d"))
    summary = DestinationRuntime(term).run(exit_when_idle_seconds=1.0)
    assert summary.error is None, summary


def _apply(spark: SparkSession, config: ConfigSet, db: str) -> None:
    root = mirror_root(config.lake_root, "d")
    for table in TABLES:
        apply_changes(
            spark, MirrorTarget(DestinationLake.of(config, "d").change_log, root, db, table)
        )


def test_float_and_double_keyed_rows_are_repaired_not_deleted(
    spark: SparkSession,
    mariadb: MariaDBDatabase,
    lake_root: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(PASSWORD_ENV, mariadb.user.password)
    conf = tmp_path / "conf"
    write_conf(
        conf,
        destination="d",
        server=mariadb.server,
        user=mariadb.user,
        database=mariadb.name,
        lake_root=lake_root,
        server_id=3151,
        extra_platform=sqlite_lease(tmp_path, renew_interval_seconds=0.2, expiry_seconds=1.5),
    )
    config = load_config(conf)
    assert not config.errors, config.errors
    db = mariadb.name
    mariadb.server.execute(
        "CREATE TABLE fk (k FLOAT PRIMARY KEY, v INT NOT NULL)",
        "CREATE TABLE dk (k DOUBLE PRIMARY KEY, v INT NOT NULL)",
        database=db,
    )
    _run(config)  # the checkpoint, before the rows
    for table, keys in TABLES.items():
        values = ", ".join(f"({k}, {i})" for i, k in enumerate(keys, 1))
        mariadb.server.execute(f"INSERT INTO {table} VALUES {values}", database=db)
    _run(config)
    _apply(spark, config, db)
    clean = reconcile_destination(config, "d", spark)
    assert clean.status == "clean", clean.metadata()

    # Row 3 (1.1) leaves each mirror; row 2 changes behind the binlog's back.
    root = mirror_root(config.lake_root, "d")
    for table in TABLES:
        spark.sql(f"DELETE FROM delta.`{mirror_uri(root, db, table)}` WHERE v = 3")
    mariadb.server.execute(
        "SET sql_log_bin = 0",
        "UPDATE fk SET v = 20 WHERE v = 2",
        "UPDATE dk SET v = 20 WHERE v = 2",
        database=db,
    )
    report = reconcile_destination(config, "d", spark)
    assert report.status == "repaired", report.metadata()
    assert report.repair is not None
    assert report.repair.deletes == {f"{db}.fk": 0, f"{db}.dk": 0}
    assert report.repair.upserts == {f"{db}.fk": 2, f"{db}.dk": 2}

    _apply(spark, config, db)
    again = reconcile_destination(config, "d", spark)
    assert again.status == "clean", again.metadata()
    replayed = replay(DestinationLake.of(config, "d").change_log)
    for table, keys in TABLES.items():
        wanted = [1, 3, *range(4, len(keys) + 1), 20]
        assert sorted(r["v"] for r in replayed.tables[f"{db}.{table}"].values()) == wanted
        mirror = spark.sql(f"SELECT v FROM delta.`{mirror_uri(root, db, table)}`").collect()
        assert sorted(int(r["v"]) for r in mirror) == wanted
