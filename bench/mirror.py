"""Time and peak memory to merge N changes into a mirror on each engine: embedded, classic, connect.

    .venv/bin/python bench/mirror.py [--changes 1000000] [--base 200000] [--wide-changes 100000]
                                     [--wide-base 20000] [--wide-columns 100] [--seed 1]

Builds two change logs (Delta, written by delta-rs as the sink writes them): a table like the
workload's ``orders`` (bigint key, int, varchar, decimal, text, datetime(6); ~200-byte images):
``--base`` inserts, then ``--changes`` changes (30 % inserts, 45 % updates, 10 % primary-key
updates, 15 % deletes); and a wide table (``--wide-columns`` int columns) with
``--wide-base`` / ``--wide-changes``. Each engine then runs the platform's ``apply_changes``
(the rebuild of the base, timed as the initial load, then one merge of all the changes with
``MERGE INTO``), in its own process (PySpark picks Spark Connect or classic per process):

* **embedded**: Sail, Spark Connect in the process, no JVM;
* **classic**: Apache Spark 4.2 with delta-spark, ``local[2]``, on the installed jars;
* **connect**: a private Apache Spark 4.2 Spark Connect server with delta-spark, ``local[2]``.

Each merge ends with the mirror's row count checked against the Python model. Engine start
(Sail ~1 s, a JVM several seconds) is not in the times. Peak memory is the largest sum of the
resident sets of every process of the run (the client process, its JVM, the Connect server),
sampled every 0.2 s. Prints figures only.
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
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa

DB = "bench"
ENGINES = ("embedded", "classic", "connect")


def columns_json(width: int) -> str:
    """The ``columns`` document: the orders table, or ``width`` int columns after the key."""

    def col(name: str, kind: str, **extra: Any) -> dict[str, Any]:
        spec = {
            "name": name,
            "type": kind,
            "unsigned": False,
            "precision": None,
            "scale": None,
            "length": None,
            "pk": name == "id",
            "values": None,
        }
        return spec | extra

    if width:
        cols = [col("id", "bigint")] + [col(f"c{i}", "int") for i in range(1, width)]
    else:
        cols = [
            col("id", "bigint"),
            col("customer_id", "int"),
            col("status", "varchar", length=64),
            col("amount", "decimal", precision=12, scale=2),
            col("note", "text"),
            col("updated", "datetime", scale=6),
        ]
    return json.dumps(cols, separators=(",", ":"))


_STATUSES = ("new", "paid", "shipped", "returned", "cancelled")
_COMMIT_ROWS = 100_000


class Model:
    """The table's live keys and rows, to make valid changes and to check the result."""

    def __init__(self, seed: int, width: int = 0) -> None:
        self.rng = random.Random(seed)
        self.width = width
        self.rows: dict[int, str] = {}
        self.keys: list[int] = []
        self.index: dict[int, int] = {}
        self.next_id = 1

    def _image(self, key: int) -> str:
        rng = self.rng
        if self.width:
            values = ",".join(f'"c{i}":{rng.randint(0, 10**6)}' for i in range(1, self.width))
            return f'{{"id":{key},{values}}}'
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


def _commit_table(
    rows: list[tuple[str, str, str | None, str | None]], first_seq: int, table: str, columns: str
) -> pa.Table:
    from cdc_platform.sink.schema import CHANGE_LOG_SCHEMA

    n = len(rows)
    ts = datetime(2026, 3, 1, tzinfo=UTC)
    data: dict[str, Any] = {
        "op": [r[0] for r in rows],
        "db": [DB] * n,
        "table": [table] * n,
        "pk": [r[1] for r in rows],
        "before": [r[2] for r in rows],
        "after": [r[3] for r in rows],
        "ddl": [None] * n,
        "columns": [columns] * n,
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


def generate(
    work: Path, table: str, *, width: int, base: int, changes: int, seed: int
) -> dict[str, Any]:
    """Write the base and the changes as Delta change logs; return the truth."""
    from deltalake import write_deltalake

    model = Model(seed, width)
    columns = columns_json(width)
    seq = 1
    base_rows = 0
    for name, count, inserts_only in (("base", base, True), ("changes", changes, False)):
        done = 0
        while done < count:
            size = min(_COMMIT_ROWS, count - done)
            rows = [model.change(inserts_only) for _ in range(size)]
            write_deltalake(str(work / f"{table}_{name}"), _commit_table(rows, seq, table, columns),
                            mode="append", partition_by=["db", "table"])  # fmt: skip
            seq += size
            done += size
        if name == "base":
            base_rows = len(model.rows)
    return {"table": table, "base_rows": base_rows, "final_rows": len(model.rows),
            "last_seq": seq - 1, "changes": changes, "base": base}  # fmt: skip


# -- the engines (each in its own process) -----------------------------------------------------


def run_engine(
    mode: str, url: str | None, work: Path, truths: list[dict[str, Any]]
) -> list[dict[str, float]]:
    """Rebuild each table's base, then merge all its changes, with ``apply_changes``."""
    import shutil

    from deltalake import DeltaTable, write_deltalake

    from cdc_platform.config.platform import SparkConfig
    from cdc_platform.spark.mirror import apply_changes
    from cdc_platform.spark.session import SparkSessionFactory
    from cdc_platform.spark.target import MirrorTarget
    from cdc_platform.testing.spark_connect import SMALL_LOCAL_CONF

    conf = {**SMALL_LOCAL_CONF, "spark.driver.memory": "2g", "spark.sql.shuffle.partitions": "4",
            "spark.driver.extraJavaOptions": "-XX:+UseParallelGC"}  # fmt: skip
    config = {
        "embedded": SparkConfig(),
        "classic": SparkConfig(mode="classic", master="local[2]", conf=conf),
        "connect": SparkConfig(mode="connect", connect_url=url),
    }[mode]
    spark = SparkSessionFactory(config).session()
    results = []
    for truth in truths:
        table = truth["table"]
        log = str(work / f"{mode}_{table}_log")
        shutil.copytree(work / f"{table}_base", log)
        root = str(work / f"{mode}_mirror")
        started = time.perf_counter()
        first = apply_changes(spark, MirrorTarget(log, root, DB, table))
        load = time.perf_counter() - started
        assert first.mirror_rows == truth["base_rows"], first
        changes = DeltaTable(str(work / f"{table}_changes")).to_pyarrow_table()
        write_deltalake(log, changes, mode="append", partition_by=["db", "table"])
        started = time.perf_counter()
        result = apply_changes(spark, MirrorTarget(log, root, DB, table))
        merge = time.perf_counter() - started
        assert result.mode == "merge", result
        assert result.mirror_rows == truth["final_rows"], result
        assert result.last_seq == truth["last_seq"]
        results.append({"load": load, "merge": merge})
    spark.stop()
    return results


def _tree_rss(pids: list[int]) -> int:
    """Resident bytes of these processes and all their descendants."""
    seen: set[int] = set()
    todo = list(pids)
    total = 0
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        try:
            status = Path(f"/proc/{pid}/status").read_text()
            total += next(int(line.split()[1]) * 1024 for line in status.splitlines()
                          if line.startswith("VmRSS:"))  # fmt: skip
            for task in Path(f"/proc/{pid}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except (OSError, StopIteration):
            continue
    return total


def _child(
    mode: str, url: str | None, work: Path, truths: list[dict[str, Any]], extra_pids: list[int]
) -> tuple[list[dict[str, float]], int]:
    """Run one engine in its own process; its results and the peak memory of the run."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE", "SPARK_LOCAL_REMOTE")
    }
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[1])
    args = [sys.executable, __file__, "--engine", mode, "--work", str(work),
            "--truth", json.dumps(truths), *(["--url", url] if url else [])]  # fmt: skip
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env)  # fmt: skip
    peak = 0
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, _tree_rss([proc.pid, *extra_pids]))
            time.sleep(0.2)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out, err = proc.communicate()
    done.set()
    sampler.join()
    if proc.returncode != 0:
        sys.stderr.write(err[-5000:])
        raise SystemExit(f"{mode} run failed")
    results: list[dict[str, float]] = json.loads(out.strip().splitlines()[-1])
    return results, peak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--changes", type=int, default=1_000_000)
    parser.add_argument("--base", type=int, default=200_000)
    parser.add_argument("--wide-changes", type=int, default=100_000)
    parser.add_argument("--wide-base", type=int, default=20_000)
    parser.add_argument("--wide-columns", type=int, default=100)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--engines", default=",".join(ENGINES))
    parser.add_argument("--engine", choices=ENGINES, help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--work", help=argparse.SUPPRESS)
    parser.add_argument("--truth", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.engine:
        print(json.dumps(run_engine(args.engine, args.url, Path(args.work),
                                    json.loads(args.truth))))  # fmt: skip
        return
    with tempfile.TemporaryDirectory(prefix="bench-mirror-") as tmp:
        work = Path(tmp)
        started = time.perf_counter()
        truths = [
            generate(work, "orders", width=0, base=args.base, changes=args.changes,
                     seed=args.seed),
            generate(work, "wide", width=args.wide_columns, base=args.wide_base,
                     changes=args.wide_changes, seed=args.seed),
        ]  # fmt: skip
        print(f"generated in {time.perf_counter() - started:.1f} s: " + "; ".join(
            f"{t['table']}: {t['base']:,} base rows + {t['changes']:,} changes, mirror rows "
            f"{t['base_rows']:,} -> {t['final_rows']:,}" for t in truths))  # fmt: skip
        figures: dict[str, tuple[list[dict[str, float]], int]] = {}
        for mode in args.engines.split(","):
            server = None
            if mode == "connect":
                from cdc_platform.testing.spark_connect import SparkConnectServer

                server = SparkConnectServer(work / "connect", driver_memory="2g",
                                            conf={"spark.sql.shuffle.partitions": "4",
                                                  "spark.driver.extraJavaOptions":
                                                  "-XX:+UseParallelGC"})  # fmt: skip
                server.start()
            try:
                figures[mode] = _child(mode, server.url if server else None, work, truths,
                                       [server.pid] if server and server.pid else [])  # fmt: skip
            finally:
                if server is not None:
                    server.stop()
    print(f"{'engine':<10} {'table':<7} {'load s':>8} {'merge s':>8} {'changes/s':>10} "
          f"{'peak MiB':>9}")  # fmt: skip
    for mode, (results, peak) in figures.items():
        for truth, result in zip(truths, results, strict=True):
            print(f"{mode:<10} {truth['table']:<7} {result['load']:8.1f} {result['merge']:8.1f} "
                  f"{truth['changes'] / result['merge']:10,.0f} {peak / 2**20:9.0f}")  # fmt: skip
    if "embedded" in figures:
        base = figures["embedded"][0]
        for mode, (results, _) in figures.items():
            ratios = ", ".join(f"{t['table']} {r['merge'] / b['merge']:.2f}"
                               for t, r, b in zip(truths, results, base, strict=True))  # fmt: skip
            print(f"merge time {mode} / embedded: {ratios}")


if __name__ == "__main__":
    main()
