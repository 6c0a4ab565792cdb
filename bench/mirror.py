"""Time to merge N changes into a mirror: embedded Sail on Delta vs. Apache Spark on Parquet.

    .venv/bin/python bench/mirror.py [--changes 1000000] [--base 200000] [--seed 1]

Builds one change log of a table like the workload's ``orders`` (bigint key, int, varchar,
decimal, text, datetime(6); ~200-byte images): ``--base`` inserts, then ``--changes`` changes
(30 % inserts, 45 % updates, 10 % primary-key updates, 15 % deletes), written once as a Delta
change log and once as plain Parquet with the same rows. Then, each engine in its own process
(PySpark picks Spark Connect or classic per process):

* **sail-merge**: the embedded engine (Sail, Spark Connect, in process) runs
  ``apply_changes``: the mirror holds the base; the N changes are reduced to the newest per
  key and merged with one ``MERGE INTO`` on Delta (plus the two small queries of the schema
  timeline, the net counts and the state commit). This is the figure the platform delivers.
* **sail-plan**: the same engine runs the DataFrame plan (newest change per key, anti-join
  of the old mirror, union, overwrite) on Delta, the form of the merge without MERGE INTO.
* **spark-plan**: Apache Spark 4.2, classic, ``local[2]``, without Delta (its jars are not
  reachable here, and Spark has no MERGE INTO on Parquet): the same DataFrame plan, the same
  ``cdc_platform.spark.plan`` code, reading Parquet and overwriting Parquet. The reference.

Each timed run ends with the mirror's row count checked against the Python model of the
table. The JVM start of Apache Spark (~6 s) and Sail's (~1 s) are not in the timings; the
initial load of the base is timed separately. Prints figures only.
"""

# ruff: noqa: PLC0415 (each engine runs in its own process and imports only what it needs)

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

DB, TABLE = "bench", "orders"
COLUMNS = json.dumps(
    [
        {"name": "id", "type": "bigint", "unsigned": False, "precision": None, "scale": None,
         "length": None, "pk": True, "values": None},
        {"name": "customer_id", "type": "int", "unsigned": False, "precision": None,
         "scale": None, "length": None, "pk": False, "values": None},
        {"name": "status", "type": "varchar", "unsigned": False, "precision": None,
         "scale": None, "length": 64, "pk": False, "values": None},
        {"name": "amount", "type": "decimal", "unsigned": False, "precision": 12, "scale": 2,
         "length": None, "pk": False, "values": None},
        {"name": "note", "type": "text", "unsigned": False, "precision": None, "scale": None,
         "length": None, "pk": False, "values": None},
        {"name": "updated", "type": "datetime", "unsigned": False, "precision": None,
         "scale": 6, "length": None, "pk": False, "values": None},
    ],
    separators=(",", ":"),
)  # fmt: skip
_STATUSES = ("new", "paid", "shipped", "returned", "cancelled")
_COMMIT_ROWS = 100_000


class Model:
    """The table's live keys and rows, to make valid changes and to check the result."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.rows: dict[int, str] = {}
        self.keys: list[int] = []
        self.index: dict[int, int] = {}
        self.next_id = 1

    def _image(self, key: int) -> str:
        rng = self.rng
        note = "n" * rng.randint(20, 80)
        micros = rng.randint(0, 999_999)
        return (
            f'{{"id":{key},"customer_id":{rng.randint(1, 50_000)},'
            f'"status":"{rng.choice(_STATUSES)}","amount":"{rng.randint(1, 10**7) / 100:.2f}",'
            f'"note":"{note}","updated":"2026-03-0{rng.randint(1, 9)} 12:00:00.{micros:06d}"}}'
        )

    def _add(self, key: int, image: str) -> None:
        self.rows[key] = image
        self.index[key] = len(self.keys)
        self.keys.append(key)

    def _remove(self, key: int) -> str:
        at = self.index.pop(key)
        last = self.keys.pop()
        if last != key:
            self.keys[at] = last
            self.index[last] = at
        return self.rows.pop(key)

    def change(self, inserts_only: bool = False) -> tuple[str, str, str | None, str | None]:
        """(op, pk, before, after) of one random change, applied to the model."""
        rng = self.rng
        roll = 0.0 if inserts_only or len(self.keys) < 10 else rng.random()
        if roll < 0.30:
            key = self.next_id
            self.next_id += 1
            image = self._image(key)
            self._add(key, image)
            return "c", f'{{"id":{key}}}', None, image
        key = self.keys[rng.randrange(len(self.keys))]
        if roll < 0.75:
            before = self.rows[key]
            after = self._image(key)
            self.rows[key] = after
            return "u", f'{{"id":{key}}}', before, after
        if roll < 0.85:
            before = self._remove(key)
            new = self.next_id
            self.next_id += 1
            after = self._image(new)
            self._add(new, after)
            return "u", f'{{"id":{new}}}', before, after
        before = self._remove(key)
        return "d", f'{{"id":{key}}}', before, None


def _commit_table(rows: list[tuple[str, str, str | None, str | None]], first_seq: int) -> pa.Table:
    from cdc_platform.sink.schema import CHANGE_LOG_SCHEMA

    n = len(rows)
    ts = datetime(2026, 3, 1, tzinfo=UTC)
    data: dict[str, Any] = {
        "op": [r[0] for r in rows],
        "db": [DB] * n,
        "table": [TABLE] * n,
        "pk": [r[1] for r in rows],
        "before": [r[2] for r in rows],
        "after": [r[3] for r in rows],
        "ddl": [None] * n,
        "columns": [COLUMNS] * n,
        "binlog_file": ["mysql-bin.000001"] * n,
        "binlog_pos": list(range(first_seq, first_seq + n)),
        "txn_index": [0] * n,
        "gtid": [None] * n,
        "server_id": [1] * n,
        "ts": [ts] * n,
        "seq": list(range(first_seq, first_seq + n)),
        "batch_seq": [first_seq // _COMMIT_ROWS + 1] * n,
        "epoch": [1] * n,
        "resume_position": [None] * n,
        "committed_at": [ts + timedelta(seconds=1)] * n,
    }
    return pa.Table.from_pydict(
        {f.name: data[f.name] for f in CHANGE_LOG_SCHEMA}, CHANGE_LOG_SCHEMA
    )


def generate(work: Path, base: int, changes: int, seed: int) -> dict[str, Any]:
    """Write the base and the changes as Delta change logs and Parquet; return the truth."""
    from deltalake import write_deltalake

    model = Model(seed)
    seq = 1
    for name, count, inserts_only in (("base", base, True), ("changes", changes, False)):
        done = 0
        while done < count:
            size = min(_COMMIT_ROWS, count - done)
            rows = [model.change(inserts_only) for _ in range(size)]
            table = _commit_table(rows, seq)
            write_deltalake(str(work / f"log_{name}"), table, mode="append",
                            partition_by=["db", "table"])  # fmt: skip
            pq.write_table(table, str(work / f"parquet_{name}" / f"part-{seq:012d}.parquet"))
            seq += size
            done += size
        if name == "base":
            base_rows = len(model.rows)
    return {"base_rows": base_rows, "final_rows": len(model.rows), "last_seq": seq - 1}


# -- the engines (each in its own process) -----------------------------------------------------


def run_sail(work: Path, truth: dict[str, Any]) -> dict[str, float]:
    import shutil

    from deltalake import DeltaTable, write_deltalake

    from cdc_platform.spark.locations import mirror_uri
    from cdc_platform.spark.mirror import apply_changes
    from cdc_platform.spark.plan import (
        apply_plan,
        change_rows,
        key_events,
        latest_per_key,
        read_change_log,
        timeline,
    )
    from cdc_platform.spark.session import SparkSessionFactory

    spark = SparkSessionFactory().session()
    log = str(work / "sail_log")
    shutil.copytree(work / "log_base", log)
    root = str(work / "sail_mirror")
    started = time.perf_counter()
    first = apply_changes(spark, log, root, DB, TABLE)
    load = time.perf_counter() - started
    assert first.mirror_rows == truth["base_rows"], first
    base_version = DeltaTable(mirror_uri(root, DB, TABLE)).version()
    changes = DeltaTable(str(work / "log_changes")).to_pyarrow_table()
    write_deltalake(log, changes, mode="append", partition_by=["db", "table"])
    started = time.perf_counter()
    result = apply_changes(spark, log, root, DB, TABLE)
    merge = time.perf_counter() - started
    assert result.mode == "merge", result
    assert result.mirror_rows == truth["final_rows"], result
    assert result.last_seq == truth["last_seq"]

    started = time.perf_counter()
    frame = read_change_log(spark, log)
    line = timeline(frame, DB, TABLE, lo=first.last_seq)
    assert line.target is not None
    latest = latest_per_key(key_events(change_rows(frame, DB, TABLE, line.lo, line.hi), line),
                            line.target)  # fmt: skip
    mirror = spark.read.format("delta").option("versionAsOf", base_version)
    out = str(work / "sail_plan")
    apply_plan(mirror.load(mirror_uri(root, DB, TABLE)), latest, line.target).write.format(
        "delta"
    ).mode("overwrite").save(out)
    plan = time.perf_counter() - started
    assert spark.read.format("delta").load(out).count() == truth["final_rows"]
    return {"load": load, "merge": merge, "plan": plan}


def run_spark(work: Path, truth: dict[str, Any]) -> dict[str, float]:
    from pyspark.sql import SparkSession

    from cdc_platform.spark.plan import (
        apply_plan,
        change_rows,
        key_events,
        latest_per_key,
        timeline,
    )

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("bench-mirror")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")

    def state(source: str, base: str | None, out: str, lo: int) -> float:
        started = time.perf_counter()
        frame = spark.read.parquet(str(work / source))
        line = timeline(frame, DB, TABLE, lo=lo)
        assert line.target is not None
        rows = change_rows(frame, DB, TABLE, line.lo, line.hi)
        latest = latest_per_key(key_events(rows, line), line.target)
        mirror = spark.read.parquet(base) if base else None
        apply_plan(mirror, latest, line.target).write.mode("overwrite").parquet(out)
        return time.perf_counter() - started

    load = state("parquet_base", None, str(work / "spark_base"), 0)
    assert spark.read.parquet(str(work / "spark_base")).count() == truth["base_rows"]
    plan = state("parquet_changes", str(work / "spark_base"), str(work / "spark_final"), 0)
    assert spark.read.parquet(str(work / "spark_final")).count() == truth["final_rows"]
    spark.stop()
    return {"load": load, "plan": plan}


def _child(engine: str, work: Path, truth: dict[str, Any]) -> dict[str, float]:
    done = subprocess.run(
        [
            sys.executable,
            __file__,
            "--engine",
            engine,
            "--work",
            str(work),
            "--truth",
            json.dumps(truth),
        ],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
    )
    if done.returncode != 0:
        sys.stderr.write(done.stderr[-5000:])
        raise SystemExit(f"{engine} run failed")
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--changes", type=int, default=1_000_000)
    parser.add_argument("--base", type=int, default=200_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--engine", choices=["sail", "spark"], help=argparse.SUPPRESS)
    parser.add_argument("--work", help=argparse.SUPPRESS)
    parser.add_argument("--truth", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.engine:
        runner = run_sail if args.engine == "sail" else run_spark
        print(json.dumps(runner(Path(args.work), json.loads(args.truth))))
        return
    with tempfile.TemporaryDirectory(prefix="bench-mirror-") as tmp:
        work = Path(tmp)
        (work / "parquet_base").mkdir()
        (work / "parquet_changes").mkdir()
        started = time.perf_counter()
        truth = generate(work, args.base, args.changes, args.seed)
        print(f"generated {args.base:,} base rows + {args.changes:,} changes "
              f"in {time.perf_counter() - started:.1f} s; mirror rows "
              f"{truth['base_rows']:,} -> {truth['final_rows']:,}")  # fmt: skip
        sail = _child("sail", work, truth)
        spark = _child("spark", work, truth)
    n = args.changes
    print(f"initial load of {args.base:,} rows: sail {sail['load']:.1f} s, "
          f"spark local[2] {spark['load']:.1f} s")  # fmt: skip
    print(f"sail-merge  (embedded, Delta, MERGE INTO): {sail['merge']:7.1f} s  "
          f"{n / sail['merge']:10,.0f} changes/s")  # fmt: skip
    print(f"sail-plan   (embedded, Delta, DataFrame plan): {sail['plan']:7.1f} s  "
          f"{n / sail['plan']:10,.0f} changes/s")  # fmt: skip
    print(f"spark-plan  (Apache Spark local[2], Parquet, DataFrame plan): {spark['plan']:7.1f} s  "
          f"{n / spark['plan']:10,.0f} changes/s")  # fmt: skip
    print(f"ratio spark-plan / sail-merge: {spark['plan'] / sail['merge']:.2f}; "
          f"spark-plan / sail-plan: {spark['plan'] / sail['plan']:.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
