"""Values no Spark type holds reach the mirror exactly: zero and partial dates, JSON documents.

Real MariaDB (binlog, lax ``sql_mode``), the real destination run, real Delta change log,
mirrors built by Spark (Sail), and the reconciliation comparing them with the source.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from deltalake import DeltaTable
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

LAX = "SET SESSION sql_mode = ''"  # zero and partial dates allowed


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
        server_id=3501,
        extra_platform=fast_database_lease(f"sqlite:///{tmp_path}/lease.db"),
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


def source_text(db: MariaDBDatabase, table: str, columns: list[str]) -> dict[int, tuple[str, ...]]:
    """id -> the server's own text of each column (NULL as None)."""
    select = ", ".join(f"CAST(`{c}` AS CHAR)" for c in columns)
    rows = db.server.query(f"SELECT id, {select} FROM `{table}`", database=db.name)
    return {int(r[0]): tuple(r[1:]) for r in rows}


def mirror_values(spark: SparkSession, uri: str, columns: list[str]) -> dict[int, tuple[str, ...]]:
    return {
        int(r["id"]): tuple(r[c] for c in columns)
        for r in spark.read.format("delta").load(uri).collect()
    }


def test_zero_and_partial_dates_round_trip_to_the_mirror(
    spark: SparkSession, destination: ConfigSet, mariadb: MariaDBDatabase
) -> None:
    mariadb.server.execute(
        LAX,
        "CREATE TABLE zd (id INT PRIMARY KEY, d DATE NOT NULL, dt DATETIME NOT NULL, "
        "dt3 DATETIME(3), ts TIMESTAMP NULL, n DATE)",
        "INSERT INTO zd VALUES "
        "(1, '0000-00-00', '0000-00-00 00:00:00', '0000-00-00 01:00:00.5', '0000-00-00', NULL), "
        "(2, '2026-00-15', '1000-00-00 12:13:14', '2026-03-00 00:00:00', NULL, '0001-00-00'), "
        "(3, '2024-02-29', '2024-02-29 13:14:15', '9999-12-31 23:59:59.999', "
        "'2024-06-01 08:30:00', '2026-03-00')",
        database=mariadb.name,
    )
    catch_up(destination)
    root = mirror_root(destination.lake_root, "d")
    columns = ["d", "dt", "dt3", "n"]
    uri = mirror_uri(root, mariadb.name, "zd")
    assert (
        apply_changes(
            spark,
            MirrorTarget(DestinationLake.of(destination, "d").change_log, root, mariadb.name, "zd"),
        ).mode
        == "rebuild"
    )
    assert mirror_values(spark, uri, columns) == source_text(mariadb, "zd", columns)
    ts = {r["id"]: r["ts"] for r in spark.read.format("delta").load(uri).collect()}
    assert (ts[1], ts[2]) == ("0000-00-00 00:00:00", None)  # the zero TIMESTAMP is no instant
    assert re.fullmatch(r"2024-06-0[12]T\d\d:\d\d:00Z", ts[3])  # the UTC instant
    mariadb.server.execute(
        LAX,
        "UPDATE zd SET d = '0000-00-00', n = '2026-00-00' WHERE id = 3",
        "UPDATE zd SET d = '2025-01-01' WHERE id = 1",
        database=mariadb.name,
    )
    catch_up(destination)
    result = apply_changes(
        spark,
        MirrorTarget(DestinationLake.of(destination, "d").change_log, root, mariadb.name, "zd"),
    )
    assert result.mode == "merge"
    assert mirror_values(spark, uri, columns) == source_text(mariadb, "zd", columns)

    report = reconcile_destination(destination, "d", spark)
    assert report.status == "clean", report.metadata()
    assert [(t.table, t.status, t.source_rows) for t in report.tables] == [("zd", "compared", 3)]

    # the typed policy, asked for: dates typed, the zero and partial ones null
    typed_root = mirror_root(destination.lake_root, "typed")
    typed = apply_changes(
        spark,
        MirrorTarget(
            DestinationLake.of(destination, "d").change_log,
            typed_root,
            mariadb.name,
            "zd",
            zero_dates="null",
        ),
    )
    assert typed.mode == "rebuild"
    rows = {
        r["id"]: r
        for r in spark.read.format("delta")
        .load(mirror_uri(typed_root, mariadb.name, "zd"))
        .collect()
    }
    assert str(rows[1]["d"]) == "2025-01-01"
    assert rows[3]["d"] is None


DOCUMENTS = [
    "null",  # the JSON literal, not SQL NULL
    '"a top-level string"',
    "123456789012345678901234567890",  # beyond 64 bits
    '{"big": -98765432109876543210.5e-3, "x": [1.0, 1, true, null]}',
    '{ "spaced" :  [ 1 , 2 ] }',  # MariaDB stores the text verbatim
    '"é 😀 \\u00e9"',
]


def test_json_documents_are_kept_exactly(
    spark: SparkSession, destination: ConfigSet, mariadb: MariaDBDatabase
) -> None:
    values = ", ".join(
        f"({i}, '{doc.replace(chr(92), chr(92) * 2)}')" for i, doc in enumerate(DOCUMENTS)
    )
    mariadb.server.execute(
        "CREATE TABLE docs (id INT PRIMARY KEY, j JSON)",
        f"INSERT INTO docs VALUES {values}, ({len(DOCUMENTS)}, NULL)",
        database=mariadb.name,
    )
    catch_up(destination)
    want = source_text(mariadb, "docs", ["j"])
    assert [want[i][0] for i in range(len(DOCUMENTS))] == DOCUMENTS
    assert want[len(DOCUMENTS)] == (None,)

    # the change log: a JSON string holding the text; SQL NULL is null
    log = DeltaTable(DestinationLake.of(destination, "d").change_log).to_pyarrow_table().to_pylist()
    images = {
        json.loads(r["pk"])["id"]: json.loads(r["after"])["j"]
        for r in log
        if r["op"] == "c" and r["table"] == "docs"
    }
    assert images == {i: w[0] for i, w in want.items()}

    root = mirror_root(destination.lake_root, "d")
    apply_changes(
        spark,
        MirrorTarget(DestinationLake.of(destination, "d").change_log, root, mariadb.name, "docs"),
    )
    uri = mirror_uri(root, mariadb.name, "docs")
    assert mirror_values(spark, uri, ["j"]) == want
    mariadb.server.execute(
        "UPDATE docs SET j = 'null' WHERE id = 1",
        "UPDATE docs SET j = NULL WHERE id = 0",
        database=mariadb.name,
    )
    catch_up(destination)
    apply_changes(
        spark,
        MirrorTarget(DestinationLake.of(destination, "d").change_log, root, mariadb.name, "docs"),
    )
    assert mirror_values(spark, uri, ["j"]) == source_text(mariadb, "docs", ["j"])
    report = reconcile_destination(destination, "d", spark)
    assert report.status == "clean", report.metadata()
    assert [(t.table, t.source_rows) for t in report.tables] == [("docs", len(DOCUMENTS) + 1)]
