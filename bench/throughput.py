"""Pipeline throughput vs. bare binlog decoding, and commit-to-visible lag at a steady rate.

    .venv/bin/python bench/throughput.py [--rows 200000] [--lag-seconds 20] [--lag-rate 5000]

1. Inserts --rows rows into a private MariaDB, then decodes that binlog range (a) with bare
   pymysqlreplication (rows as dicts, nothing else) and (b) through the whole pipeline
   (BinlogSource -> EventStore -> DeltaChangeLog commits), in the same run; prints rows/s of
   both and their ratio.
2. Runs the pipeline live while a writer inserts --lag-rate rows/s (batches of 100 per
   transaction); each row carries its insert time, so the change log's `committed_at` minus it
   is the commit-to-visible lag; prints p50 / p99.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path

import pyarrow.compute as pc
from deltalake import DeltaTable
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

from cdc_platform.config.models import InstanceConfig
from cdc_platform.events import ResumePosition
from cdc_platform.runtime import DestinationRuntime
from cdc_platform.sink import DeltaChangeLog
from cdc_platform.sink.term import WriteTerm
from cdc_platform.testing.destinations import instance_config
from cdc_platform.testing.mariadb import MariaDBServer

TABLE = """CREATE TABLE bench.items (
    id BIGINT PRIMARY KEY, sku VARCHAR(32), qty INT, price DECIMAL(10,2),
    note VARCHAR(200), t_insert DOUBLE, updated DATETIME(6)
)"""


def insert_rows(server: MariaDBServer, start: int, count: int, per_txn: int = 1000) -> None:
    with server.connect("bench", autocommit=False) as conn, conn.cursor() as cur:
        for base in range(start, start + count, per_txn):
            n = min(per_txn, start + count - base)
            now = time.time()
            cur.executemany(
                "INSERT INTO items VALUES (%s, %s, %s, %s, %s, %s, NOW(6))",
                [
                    (i, f"SKU-{i:08d}", i % 97, f"{i % 10000}.25", "n" * (i % 50), now)
                    for i in range(base, base + n)
                ],
            )
            conn.commit()


def position(server: MariaDBServer) -> ResumePosition:
    file, pos = server.query("SHOW MASTER STATUS")[0][:2]
    return ResumePosition(str(file), int(pos))


def bare_decode(
    server: MariaDBServer, user: tuple[str, str], start: ResumePosition, rows: int
) -> float:
    stream = BinLogStreamReader(
        connection_settings={
            "host": server.host,
            "port": server.port,
            "user": user[0],
            "passwd": user[1],
        },
        server_id=5001,
        log_file=start.file,
        log_pos=start.pos,
        resume_stream=True,
        blocking=True,
        only_events=[WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent],
        only_schemas=["bench"],
    )
    seen = 0
    began = time.perf_counter()
    try:
        for event in stream:
            seen += len(event.rows)
            if seen >= rows:
                break
    finally:
        stream.close()
    return seen / (time.perf_counter() - began)


def config(server: MariaDBServer, user: str, **store: object) -> InstanceConfig:
    return instance_config(
        server, user, [r"bench\..*"], server_id=5002, password_env="BENCH_CDC_PASSWORD", **store
    )


def pipeline(
    server: MariaDBServer, user: str, start: ResumePosition, rows: int, lake: Path
) -> float:
    uri = str(lake / "throughput" / "changes")
    sink = DeltaChangeLog(uri, "throughput")
    sink.commit((), batch_seq=1, resume=start, epoch=0)
    sink.close()
    runtime = DestinationRuntime(
        WriteTerm("throughput", config(server, user), uri), metrics_interval_seconds=3600
    )
    done = threading.Event()
    began = time.perf_counter()
    finished = [0.0]

    def watch() -> None:
        while not done.is_set():
            if runtime.metrics().rows_total >= rows:
                finished[0] = time.perf_counter()
                runtime.request_stop("all rows committed")
                return
            time.sleep(0.1)  # a faster poll steals the GIL from the pipeline it measures

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    runtime.run(exit_when_idle_seconds=10)
    done.set()
    end = finished[0] or time.perf_counter()
    return runtime.metrics().rows_total / (end - began)


def lag(server: MariaDBServer, user: str, lake: Path, seconds: float, rate: int) -> list[float]:
    uri = str(lake / "lag" / "changes")
    runtime = DestinationRuntime(
        WriteTerm("lag", config(server, user, batch_timeout_seconds=0.1), uri),
        metrics_interval_seconds=3600,
    )
    runner = threading.Thread(target=runtime.run, daemon=True)
    runner.start()
    while not Path(uri).exists():
        time.sleep(0.05)
    time.sleep(0.5)
    next_id = 10_000_000
    per_txn = 100
    interval = per_txn / rate
    deadline = time.monotonic() + seconds
    tick = time.monotonic()
    with server.connect("bench", autocommit=False) as conn, conn.cursor() as cur:
        while time.monotonic() < deadline:
            now = time.time()
            cur.executemany(
                "INSERT INTO items VALUES (%s, %s, %s, %s, %s, %s, NOW(6))",
                [(i, "LAG", 1, "1.00", "", now) for i in range(next_id, next_id + per_txn)],
            )
            conn.commit()
            next_id += per_txn
            tick += interval
            time.sleep(max(0.0, tick - time.monotonic()))
    time.sleep(3)
    runtime.request_stop()
    runner.join(timeout=60)
    table = DeltaTable(uri).to_pyarrow_table(columns=["op", "after", "committed_at"])
    table = table.filter(pc.equal(table["op"], "c"))
    lags = []
    for after, committed in zip(
        table["after"].to_pylist(), table["committed_at"].to_pylist(), strict=True
    ):
        lags.append(committed.timestamp() - json.loads(after)["t_insert"])
    return lags


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--lag-seconds", type=float, default=20.0)
    parser.add_argument("--lag-rate", type=int, default=5000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="cdc-bench-") as tmp:
        root = Path(tmp)
        with MariaDBServer(root / "mariadb") as server:
            user = server.create_replication_user("bench", "bench-pw")
            os.environ["BENCH_CDC_PASSWORD"] = user.password
            server.execute("CREATE DATABASE bench", TABLE)
            start = position(server)
            insert_rows(server, 1, args.rows)
            bare = bare_decode(server, (user.name, user.password), start, args.rows)
            piped = pipeline(server, user.name, start, args.rows, root / "lake")
            print(f"rows: {args.rows}")
            print(f"bare pymysqlreplication decode: {bare:,.0f} rows/s")
            print(f"full pipeline into Delta:       {piped:,.0f} rows/s")
            print(f"ratio pipeline / bare:          {piped / bare:.2f}")
            if args.lag_seconds > 0:
                lags = sorted(
                    lag(server, user.name, root / "lake", args.lag_seconds, args.lag_rate)
                )
                p50 = statistics.median(lags)
                p99 = lags[min(len(lags) - 1, int(len(lags) * 0.99))]
                print(
                    f"commit-to-visible lag at {args.lag_rate} rows/s over {args.lag_seconds:g} s "
                    f"({len(lags)} rows): p50 {p50 * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms"
                )


if __name__ == "__main__":
    main()
