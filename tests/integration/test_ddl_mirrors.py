"""Schema changes keep mirrors exact: every DDL that changes, replaces or drops rows without
row events, applied on real MariaDB while the destination streams, then the mirrors built
through the Dagster asset; every mirror equals its source table row for row, and the mirrors
of dropped and renamed tables are marked.

One stream, many tables, one mirror build (the cases are grouped to keep the test short).
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
from dagster import materialize
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from cdc_platform.backfill.reread import RereadRecord, pending_rereads
from cdc_platform.config import load_config
from cdc_platform.coordination.table_catalog import discover_tables
from cdc_platform.runtime.supervised import supervised_destination
from cdc_platform.sink.destination_lake import DestinationLake
from cdc_platform.spark.locations import mirror_root, mirror_uri
from cdc_platform.spark.mirror import apply_changes
from cdc_platform.spark.target import MirrorTarget
from cdc_platform.testing.destinations import PASSWORD_ENV, sqlite_lease, write_conf
from cdc_platform.testing.processes import let_time_pass
from dagster_defs.assets import change_log_specs
from dagster_defs.io_manager import MIRROR_IO_MANAGER, MirrorIOManager
from dagster_defs.resources import PlatformResource, SparkResource
from dagster_defs.table_assets import mirror_assets
from tests.conftest import MariaDBDatabase, S3Lake
from tests.integration.test_spark_pipeline import assert_mirror_equals_source

pytestmark = pytest.mark.integration

PARTITIONED = (
    "(id INT PRIMARY KEY, v INT) PARTITION BY RANGE (id) (PARTITION p0 VALUES LESS THAN (100),"
    " PARTITION p1 VALUES LESS THAN (200), PARTITION p2 VALUES LESS THAN MAXVALUE)"
)


def _tables(db: str) -> list[str]:
    rows = "(1, 10), (2, 20), (3, 30)"
    statements = []
    for table in (
        "add_default", "add_not_null", "widen", "ren", "alter_ren", "drop_a", "drop_b", "cor",
        "exch_src", "keep",
    ):  # fmt: skip
        kind = "SMALLINT" if table == "widen" else "INT"
        statements.append(f"CREATE TABLE {table} (id INT PRIMARY KEY, v {kind})")
        statements.append(f"INSERT INTO {table} VALUES {rows}")
    statements += [
        "UPDATE exch_src SET id = id + 10",  # 11, 12, 13: they fit partition p0
        "CREATE TABLE modify_dec (id INT PRIMARY KEY, amount DECIMAL(10,2))",
        "INSERT INTO modify_dec VALUES (1, 12.50), (2, 12.49), (3, -3.50), (4, 99999999.99)",
        f"CREATE TABLE parts {PARTITIONED}",
        "INSERT INTO parts VALUES (1, 1), (2, 2), (101, 101), (102, 102), (201, 201)",
        f"CREATE TABLE exch {PARTITIONED}",
        "INSERT INTO exch VALUES (1, 1), (2, 2), (150, 150)",
        f"CREATE TABLE conv {PARTITIONED}",
        "INSERT INTO conv VALUES (1, 1), (150, 150), (250, 250)",
        f"CREATE DATABASE {db}_x",
        f"CREATE TABLE {db}_x.gone (id INT PRIMARY KEY, v INT)",
        f"INSERT INTO {db}_x.gone VALUES {rows}",
    ]
    return statements


def _ddl(db: str) -> list[list[str]]:
    """Groups of statements; the stream is given a moment between groups, so the re-reads
    run while later statements and row changes arrive."""
    return [
        [
            "ALTER TABLE add_default ADD COLUMN color VARCHAR(16) DEFAULT 'red'",
            "UPDATE add_default SET v = 11 WHERE id = 1",
            "ALTER TABLE add_not_null ADD COLUMN n INT NOT NULL, ADD COLUMN s VARCHAR(4) NOT NULL",
            "INSERT INTO add_not_null VALUES (4, 40, 7, 'x')",
        ],
        [
            "ALTER TABLE modify_dec MODIFY amount INT",  # MariaDB rounds: 13, 12, -4
            "INSERT INTO modify_dec VALUES (5, 5)",
            "ALTER TABLE widen MODIFY v BIGINT",
            "UPDATE widen SET v = 5000000000 WHERE id = 2",
        ],
        [
            "ALTER TABLE parts TRUNCATE PARTITION p0",
            "ALTER TABLE parts DROP PARTITION p1",
            "INSERT INTO parts VALUES (50, 50)",
            "ALTER TABLE exch EXCHANGE PARTITION p0 WITH TABLE exch_src",
            "UPDATE exch SET v = 99 WHERE id = 150",
            "ALTER TABLE conv CONVERT PARTITION p0 TO TABLE conv_p0",
            "UPDATE conv_p0 SET v = 2 WHERE id = 1",
        ],
        [
            "CREATE OR REPLACE TABLE cor (id INT PRIMARY KEY, w VARCHAR(8))",
            "INSERT INTO cor VALUES (7, 'seven')",
            "RENAME TABLE ren TO ren2",
            "UPDATE ren2 SET v = 21 WHERE id = 2",
            "ALTER TABLE alter_ren RENAME TO alter_ren2",
            "DROP TABLE drop_a, `drop_b`",
            f"DROP DATABASE {db}_x",
        ],
        [  # what worked before keeps working
            "ALTER TABLE keep ADD COLUMN w INT, DROP COLUMN v",
            "ALTER TABLE keep CHANGE w ww INT",
            "UPDATE keep SET ww = id",
            "ALTER TABLE keep DROP PRIMARY KEY, ADD PRIMARY KEY (id, ww)",
        ],
    ]


LIVE = [
    "add_default", "add_not_null", "modify_dec", "widen", "parts", "exch", "exch_src", "cor",
    "ren2", "alter_ren2", "keep", "conv", "conv_p0",
]  # fmt: skip
DROPPED = {
    "ren": "renamed to {db}.ren2",
    "alter_ren": "renamed to {db}.alter_ren2",
    "drop_a": "dropped",
    "drop_b": "dropped",
}


def test_mirrors_equal_the_source_after_each_ddl(
    spark: SparkSession,
    mariadb: MariaDBDatabase,
    lake_root: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
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
        server_id=2141,
        extra_platform=sqlite_lease(tmp_path),
    )
    instance = conf / "destinations" / "d" / "instance.yaml"
    instance.write_text(
        instance.read_text().replace(f"['{db}\\..*']", f"['{db}(_x)?\\..*']")
        + "snapshot: {chunk_size: 2}\n"  # several chunks per re-read
    )
    config = load_config(conf)
    assert not config.errors, config.errors

    copied: set[str] = set()  # re-read progress, as the Dagster run observes it

    def run(during: list[list[str]] | None = None) -> None:
        with supervised_destination(
            config, config.destinations["d"], on_snapshot_progress=lambda p: copied.add(p.table)
        ) as supervisor:
            done = threading.Thread(
                target=lambda: supervisor.run(exit_when_idle_seconds=2.5), daemon=True
            )
            done.start()
            for group in during or []:
                server.execute(*group, database=db)
                let_time_pass(0.5, because="re-reads run while later groups arrive")
            done.join(timeout=180)
            assert not done.is_alive()

    run()  # pins the start position
    server.execute(*_tables(db), database=db)
    run(_ddl(db))
    assert (
        DestinationLake.at(lake_root, "d").reread_tables.read_json() is None
    )  # every re-read done
    rewritten = ["add_default", "add_not_null", "modify_dec", "widen", "parts", "exch", "exch_src"]
    rewritten += ["conv", "conv_p0", "cor", "ren2", "alter_ren2", "keep"]
    assert copied == {f"{db}.{t}" for t in rewritten}

    mirrors = mirror_assets(config, "d", discover_tables(config, "d"))
    assert mirrors is not None
    resources = {
        "platform": PlatformResource(conf_dir=str(conf)),
        "spark": SparkResource(conf_dir=str(conf)),
        MIRROR_IO_MANAGER: MirrorIOManager(conf_dir=str(conf)),
    }
    built = materialize([*change_log_specs(config), mirrors], resources=resources)
    assert built.success
    events = built.asset_materializations_for_node(mirrors.op.name)
    by_table = {".".join(e.asset_key.path[2:]): e.metadata for e in events}
    expected = {f"{db}.{t}": why.format(db=db) for t, why in DROPPED.items()}
    expected[f"{db}_x.gone"] = "database dropped"
    dropped = {name: m["dropped"].value for name, m in by_table.items() if "dropped" in m}
    assert dropped == expected  # only where set: an empty value said nothing (issue 44.9)
    assert not any(m["rereading"].value for m in by_table.values())

    root = mirror_root(lake_root, "d")
    for table in LIVE:
        assert_mirror_equals_source(spark, mariadb, root, table)
    # while a re-read is pending, a mirror waits before its DDL (the last complete state)
    changes = str(lake_root / "d" / "changes")
    held = apply_changes(
        spark, MirrorTarget(changes, str(tmp_path / "held"), db, "add_default"), held=True
    )
    assert (held.columns, held.mirror_rows) == (("id", "v"), 3)
    for name in expected:
        mirror_db, table = name.split(".")
        assert spark.read.format("delta").load(mirror_uri(root, mirror_db, table)).count() == 0
        again = apply_changes(spark, MirrorTarget(changes, root, mirror_db, table))
        assert (again.mode, again.dropped) == ("noop", "dropped")


def test_a_reread_left_on_the_list_is_done_at_the_next_start(
    mariadb: MariaDBDatabase, lake_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The list of tables to re-read is in the lake: a lease holder that stopped (or crashed)
    before copying them leaves them to the next one, which copies them before it streams."""
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
        server_id=2142,
        extra_platform=sqlite_lease(tmp_path),
    )
    config = load_config(conf)

    def run() -> None:
        with supervised_destination(config, config.destinations["d"]) as supervisor:
            summary = supervisor.run(exit_when_idle_seconds=1.5)
            assert summary.error is None, summary

    run()  # pins the start position
    server.execute(
        "CREATE TABLE t (id INT PRIMARY KEY, v INT)",
        "INSERT INTO t VALUES (1, 1), (2, 2)",
        database=db,
    )
    run()
    record = DestinationLake.at(lake_root, "d").reread_tables
    # as if the holder stopped before copying them; one was dropped since: left out
    RereadRecord(record).add([f"{db}.t", f"{db}.gone"])
    run()
    assert record.read_json() is None
    logged = DeltaTable(str(lake_root / "d" / "changes")).to_pyarrow_table(
        columns=["op", "table", "after"]
    )
    copied = [r["after"] for r in logged.to_pylist() if r["op"] == "r" and r["table"] == "t"]
    assert sorted(json.loads(a)["id"] for a in copied) == [1, 2]


def test_the_reread_list_lives_in_the_bucket(s3_lake: S3Lake) -> None:
    """On S3 the list is an object in the lake (any node continues it), marks included."""
    record = RereadRecord(DestinationLake.at(s3_lake.uri, "d").reread_tables)
    record.add(["s.a", "s.b"])
    taken = record.load()
    record.add(["s.b"])
    objects = s3_lake.keys()  # a listing of the bucket, not a dict
    assert objects == [f"{s3_lake.bucket}/{s3_lake.prefix}/d/_reread_tables.json"]
    assert pending_rereads(DestinationLake.at(s3_lake.uri, "d")) == {"s.a", "s.b"}
    record.remove(taken)
    assert pending_rereads(DestinationLake.at(s3_lake.uri, "d")) == {"s.b"}
    record.remove(record.load())
    assert s3_lake.keys() == []
