"""The DataFrame form of the merge and the daily figures give the same results on Apache Spark
without Delta as on Sail.

The change log is handed to classic Apache Spark 4.2 as plain Parquet, and it runs the
DataFrame form of the merge (``cdc_platform.spark.plan``) and the figures query in a child
process (PySpark chooses classic or Spark Connect once per process). Its rows and figures must
equal what the embedded engine produces from the Delta change log with ``apply_changes``
(MERGE INTO) and ``daily_change_stats``. ``apply_changes`` itself (MERGE INTO, VERSION AS OF)
runs on Apache Spark with delta-spark in the engine-parametrised tests.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from dataclasses import asdict
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from cdc_platform.spark.history import daily_change_stats
from cdc_platform.spark.locations import mirror_uri
from cdc_platform.spark.mirror import apply_changes
from cdc_platform.testing.spark_changes import ChangeLogWriter, column
from tests.integration.test_spark_mirror import NOW, RandomChanges, items_table

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]

CHILD = """
import json, sys
from dataclasses import asdict
from datetime import date
from pyspark.sql import SparkSession
from cdc_platform.spark.history import change_stats
from cdc_platform.spark.plan import apply_plan, change_rows, key_events, latest_per_key, timeline
from tests.integration.test_spark_portability import plain

parquet, day = sys.argv[1], date.fromisoformat(sys.argv[2])
spark = (
    SparkSession.builder.master("local[1]")
    .config("spark.sql.session.timeZone", "UTC")
    .config("spark.sql.shuffle.partitions", "2")
    .config("spark.ui.enabled", "false")
    .getOrCreate()
)
spark.sparkContext.setLogLevel("ERROR")
frame = spark.read.parquet(parquet)
line = timeline(frame, "shop", "items", lo=0)
rows = change_rows(frame, "shop", "items", 0, line.hi)
latest = latest_per_key(key_events(rows, line), line.target)
state = apply_plan(None, latest, line.target)
rows = [plain(r.asDict()) for r in state.collect()]
stats = [asdict(s) | {"day": str(s.day)} for s in change_stats(frame, day)]
print(json.dumps({"columns": state.columns, "rows": rows, "stats": stats}))
spark.stop()
"""


def classic_env() -> dict[str, str]:
    """This process's environment without the marks PySpark left when it went Spark Connect
    (a child would inherit them and refuse to start classic Spark)."""
    marks = ("SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE", "SPARK_LOCAL_REMOTE")
    env = {k: v for k, v in os.environ.items() if k not in marks}
    return env | {"PYTHONPATH": str(REPO)}


def plain(row: dict[str, Any]) -> dict[str, Any]:
    """JSON-safe, comparable values (the same on both sides)."""

    def one(value: Any) -> Any:
        if isinstance(value, Decimal):
            return str(value)
        if isinstance(value, datetime | date):
            return value.isoformat()
        if isinstance(value, bytes | bytearray):
            return base64.b64encode(bytes(value)).decode()
        return value

    return {k: one(v) for k, v in row.items()}


def test_apache_spark_gives_the_same_mirror_and_figures(
    spark: SparkSession, tmp_path: Path
) -> None:
    source = items_table()
    log = ChangeLogWriter(str(tmp_path / "changes"))
    changes = RandomChanges(source, seed=21)
    log.commit(changes.batch(60), ts=NOW, committed_at=NOW)
    log.commit(
        [
            *changes.batch(20),
            source.rename_column("name", "title"),
            source.add_column(column("extra", "int"), "INT"),
            *changes.batch(40),
        ],
        ts=NOW,
        committed_at=datetime(2026, 3, 1, 12, 0, 7, tzinfo=UTC),
    )
    root = str(tmp_path / "mirror")
    apply_changes(spark, log.uri, root, "shop", "items")
    frame = spark.read.format("delta").load(mirror_uri(root, "shop", "items"))
    sail_rows = sorted((plain(r.asDict()) for r in frame.collect()), key=lambda r: r["id"])
    sail_stats = [
        asdict(s) | {"day": str(s.day)} for s in daily_change_stats(spark, log.uri, NOW.date())
    ]

    parquet = tmp_path / "parquet"
    parquet.mkdir()
    pq.write_table(DeltaTable(log.uri).to_pyarrow_table(), str(parquet / "part-0.parquet"))
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(parquet), NOW.date().isoformat()],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
        cwd=REPO,
        env=classic_env(),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    spark_result = json.loads(done.stdout.strip().splitlines()[-1])
    assert spark_result["columns"] == frame.columns == source.names
    assert sorted(spark_result["rows"], key=lambda r: r["id"]) == sail_rows
    assert len(sail_rows) == len(source.rows)
    assert spark_result["stats"] == sail_stats
