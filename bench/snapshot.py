"""Initial snapshot speed: rows/s of a chunked, watermark-merged snapshot into Delta.

    .venv/bin/python bench/snapshot.py [--rows 200000] [--chunk-size N | --chunk-seconds 0.5]
                                       [--rate 0]
                                       [--lag [--tick-rate 50]] [--reconcile] [--differences 10]

Fills a table in a private MariaDB with --rows rows, then snapshots it into a fresh change
log with SnapshotRunner (each chunk: SELECT, high watermark, binlog segment, one Delta
commit) and prints rows/s. Without --chunk-size the chunks are sized by time (the default of
the platform: about --chunk-seconds each). With --rate N a writer updates random rows at N
transactions/s during the snapshot, and the replayed change log is checked against the
table at the end (after the normal run catches up).

With --lag a second writer streams too: it inserts a row stamped with its wall-clock time
into another captured table at --tick-rate transactions/s while the snapshot runs, and the
stream's lag during the snapshot is printed as p50/p99/max of (the change log's
``committed_at`` of each such row - its stamp): how long a change waited for the change log
while the table was being copied.

With --reconcile it then builds the table's mirror (Spark, embedded Sail), times a
reconciliation that finds nothing, injects --differences divergences (a third each: rows
deleted from the mirror, rows updated and rows deleted with sql_log_bin=0), times the
reconciliation that finds and repairs them, and checks that a third one after the mirror's
next apply finds nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import tempfile
import threading
import time
from pathlib import Path

from deltalake import DeltaTable

import cdc_platform
from cdc_platform.backfill.chunk_sizing import DEFAULT_CHUNK_SECONDS
from cdc_platform.backfill.progress import SnapshotObservers
from cdc_platform.backfill.snapshot import SnapshotProgress, SnapshotRunner
from cdc_platform.config.instance import InstanceConfig, SnapshotSettings
from cdc_platform.runtime import DestinationRuntime
from cdc_platform.sink import MaintenancePolicy
from cdc_platform.sink.destination_lake import DestinationLake
from cdc_platform.sink.term import WriteTerm
from cdc_platform.testing.destinations import instance_config
from cdc_platform.testing.mariadb import MariaDBServer
from cdc_platform.testing.replay import replay

TABLE = """CREATE TABLE bench.items (
    id BIGINT PRIMARY KEY, sku VARCHAR(32), qty INT, price DECIMAL(10,2),
    note VARCHAR(200), updated DATETIME(6)
) CHARACTER SET utf8mb4"""


def fill(server: MariaDBServer, rows: int, per_txn: int = 50_000) -> None:
    """``rows`` rows made by the server (its sequence engine), ``per_txn`` per transaction."""
    with server.connect("bench", autocommit=False) as conn, conn.cursor() as cur:
        for base in range(1, rows + 1, per_txn):
            last = min(base + per_txn, rows + 1) - 1
            cur.execute(
                "INSERT INTO items SELECT seq, CONCAT('SKU-', LPAD(seq, 8, '0')), seq % 97, "
                "CONCAT(seq % 10000, '.25'), REPEAT('n', seq % 50), NOW(6) "
                f"FROM seq_{base}_to_{last}"
            )
            conn.commit()


def writer(server: MariaDBServer, rows: int, rate: float, stop: threading.Event) -> int:
    done = 0
    rng = random.Random(5)
    with server.connect("bench") as conn, conn.cursor() as cur:
        while not stop.is_set():
            cur.execute(
                "UPDATE items SET qty = qty + 1, updated = NOW(6) WHERE id = %s",
                (rng.randint(1, rows),),
            )
            done += 1
            time.sleep(1.0 / rate)
    return done


TICKS = "CREATE TABLE bench.ticks (id BIGINT AUTO_INCREMENT PRIMARY KEY, t DOUBLE NOT NULL)"


def config(server: MariaDBServer, user: str) -> InstanceConfig:
    return instance_config(
        server,
        user,
        [r"bench\.items", r"bench\.ticks"],
        server_id=3101,
        password_env="BENCH_CDC_PASSWORD",
    )


def ticker(server: MariaDBServer, rate: float, stop: threading.Event) -> int:
    """Insert rows stamped with their wall-clock time at ``rate`` per second."""
    done = 0
    with server.connect("bench") as conn, conn.cursor() as cur:
        next_at = time.monotonic()
        while not stop.is_set():
            cur.execute("INSERT INTO ticks (t) VALUES (%s)", (time.time(),))
            done += 1
            next_at += 1.0 / rate
            time.sleep(max(0.0, next_at - time.monotonic()))
    return done


def stream_lag(uri: str, since: float, until: float) -> list[float]:
    """Seconds from each tick's stamp to its commit, for ticks stamped in [since, until]."""
    rows = (
        DeltaTable(uri)
        .to_pyarrow_table(columns=["table", "op", "after", "committed_at"])
        .to_pylist()
    )
    lags: list[float] = []
    for row in rows:
        if row["table"] != "ticks" or row["op"] != "c":
            continue
        stamp = float(json.loads(row["after"])["t"])
        if since <= stamp <= until:
            lags.append(row["committed_at"].timestamp() - stamp)
    return sorted(lags)


def percentile(values: list[float], fraction: float) -> float:
    return values[min(len(values) - 1, int(fraction * len(values)))] if values else float("nan")


def reconcile(
    server: MariaDBServer, user: object, root: Path, lake: Path, differences: int
) -> None:
    from cdc_platform.config import load_config  # noqa: PLC0415 (only with --reconcile)
    from cdc_platform.reconcile.service import reconcile_destination  # noqa: PLC0415 (only with --reconcile)
    from cdc_platform.spark import MirrorTarget, SparkSessionFactory, apply_changes  # noqa: PLC0415 (only with --reconcile)
    from cdc_platform.spark.locations import mirror_root, mirror_uri  # noqa: PLC0415 (only with --reconcile)
    from cdc_platform.testing.destinations import PASSWORD_ENV, write_conf  # noqa: PLC0415 (only with --reconcile)

    os.environ[PASSWORD_ENV] = os.environ["BENCH_CDC_PASSWORD"]
    conf = root / "conf"
    write_conf(
        conf,
        destination="bench",
        server=server,
        user=user,
        database="bench",
        lake_root=lake,
        server_id=3102,
    )
    configset = load_config(conf)
    factory = SparkSessionFactory()
    spark = factory.session()
    uri = DestinationLake.of(configset, "bench").change_log
    mroot = mirror_root(lake, "bench")
    started = time.perf_counter()
    applied = apply_changes(spark, MirrorTarget(uri, mroot, "bench", "items"))
    print(f"mirror: {applied.mirror_rows} rows built in {time.perf_counter() - started:.1f} s")

    def timed(label: str) -> None:
        report = reconcile_destination(configset, "bench", spark)
        table = report.tables[0]
        repair = report.repair
        print(
            f"reconcile ({label}): {report.seconds:.1f} s for {table.source_rows} rows, "
            f"{table.differing_chunks}/{table.chunks} chunks differ, {table.missing_in_mirror} "
            f"missing, {table.changed} changed, {table.extra_in_mirror} extra; repaired: "
            f"{sum(repair.upserts.values()) if repair else 0} upserts, "
            f"{sum(repair.deletes.values()) if repair else 0} deletes in "
            f"{repair.seconds if repair else 0:.1f} s"
        )

    timed("clean")
    rng = random.Random(11)
    ids = rng.sample(range(1, 1 + applied.mirror_rows), differences)
    third = max(1, differences // 3)
    gone_from_mirror, updated, deleted = ids[:third], ids[third : 2 * third], ids[2 * third :]
    spark.sql(
        f"DELETE FROM delta.`{mirror_uri(mroot, 'bench', 'items')}` "
        f"WHERE id IN ({', '.join(map(str, gone_from_mirror))})"
    )
    server.execute(
        "SET sql_log_bin = 0",
        f"UPDATE items SET qty = -1 WHERE id IN ({', '.join(map(str, updated))})",
        f"DELETE FROM items WHERE id IN ({', '.join(map(str, deleted))})",
        database="bench",
    )
    timed(f"{differences} injected")
    apply_changes(spark, MirrorTarget(uri, mroot, "bench", "items"))
    timed("after the mirror applied the repairs")
    factory.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--chunk-size", type=int, default=None, help="fixed rows per chunk")
    parser.add_argument("--chunk-seconds", type=float, default=None, help="target s per chunk")
    parser.add_argument("--rate", type=float, default=0.0, help="updates/s during the snapshot")
    parser.add_argument(
        "--lag", action="store_true", help="stream inserts during the snapshot; print their lag"
    )
    parser.add_argument("--tick-rate", type=float, default=50.0, help="inserts/s with --lag")
    parser.add_argument("--reconcile", action="store_true", help="also time reconciliation")
    parser.add_argument("--differences", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="cdc-bench-") as tmp:
        root = Path(tmp)
        with MariaDBServer(root / "mariadb") as server:
            user = server.create_replication_user("bench", "bench-pw")
            os.environ["BENCH_CDC_PASSWORD"] = user.password
            server.execute("CREATE DATABASE bench", TABLE, TICKS)
            started = time.perf_counter()
            fill(server, args.rows)
            print(f"filled {args.rows} rows in {time.perf_counter() - started:.1f} s")
            print(f"code: {Path(cdc_platform.__file__).parent}, load average {os.getloadavg()}")
            lake = root / "lake"
            layout = DestinationLake.at(lake, "bench")
            uri = layout.change_log
            stop = threading.Event()
            updates: list[int] = []
            thread = None
            if args.rate > 0:
                thread = threading.Thread(
                    target=lambda: updates.append(writer(server, args.rows, args.rate, stop)),
                    daemon=True,
                )
                thread.start()
            ticks: list[int] = []
            tick_thread = None
            if args.lag:
                tick_thread = threading.Thread(
                    target=lambda: ticks.append(ticker(server, args.tick_rate, stop)),
                    daemon=True,
                )
                tick_thread.start()
            last = [0.0]

            def progress(p: SnapshotProgress) -> None:
                if p.seconds - last[0] >= 2 or p.rows_read >= p.estimated_rows:
                    last[0] = p.seconds
                    print(
                        f"  {p.rows_read}/{p.estimated_rows} rows, {p.seconds:.1f} s, "
                        f"chunk of {p.chunk_rows}"
                    )

            runner = SnapshotRunner(
                WriteTerm(
                    "bench", config(server, user.name), layout, maintenance=MaintenancePolicy()
                ),
                DestinationLake.at(lake, "bench").snapshot_state,
                tables=["bench.items"],
                settings=SnapshotSettings(
                    chunk_size=args.chunk_size,
                    chunk_seconds=args.chunk_seconds or DEFAULT_CHUNK_SECONDS,
                ),
                observers=SnapshotObservers(on_progress=progress),
            )
            snapshot_started = time.time()
            result = runner.run()
            snapshot_ended = time.time()
            stop.set()
            for running in (thread, tick_thread):
                if running is not None:
                    running.join()
            rate = result.rows_written / result.seconds
            print(
                f"snapshot: {result.rows_written} rows in {result.chunks} chunks "
                f"({args.chunk_size or 'sized by time'}), {result.seconds:.1f} s = "
                f"{rate:,.0f} rows/s "
                f"({result.rows_dropped} merged from the binlog, {result.streamed_events} "
                f"binlog events streamed{f', {updates[0]} updates' if updates else ''})"
            )
            print(f"load average after the snapshot {os.getloadavg()}")
            if args.lag:
                lags = stream_lag(uri, snapshot_started, snapshot_ended)
                print(
                    f"stream during the snapshot: {len(lags)} inserts at {args.tick_rate:g}/s, "
                    f"lag p50 {percentile(lags, 0.5):.2f} s, p99 {percentile(lags, 0.99):.2f} s, "
                    f"max {lags[-1] if lags else float('nan'):.2f} s"
                )
            if args.rate > 0:
                summary = DestinationRuntime(
                    WriteTerm("bench", config(server, user.name), layout)
                ).run(exit_when_idle_seconds=1.5)
                assert summary.error is None, summary
                state = replay(uri).tables["bench.items"]
                source = {
                    int(r[0]): r
                    for r in server.query(
                        "SELECT id, qty, CAST(updated AS CHAR) FROM items", "bench"
                    )
                }
                bad = [
                    k
                    for k, row in state.items()
                    if (row["qty"], row["updated"]) != tuple(source[int(k[0][1])][1:])
                ]
                exact = len(state) == len(source) and not bad
                print(f"replay == source: {exact} ({len(state)} rows, {len(bad)} differ)")
            if args.reconcile:
                reconcile(server, user, root, lake, args.differences)


if __name__ == "__main__":
    main()
