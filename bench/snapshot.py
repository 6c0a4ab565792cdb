"""Initial snapshot speed: rows/s of a chunked, watermark-merged snapshot into Delta.

    .venv/bin/python bench/snapshot.py [--rows 200000] [--chunk-size 10000] [--rate 0]

Fills a table in a private MariaDB with --rows rows, then snapshots it into a fresh change
log with SnapshotRunner (each chunk: low watermark, SELECT, high watermark, binlog segment,
one Delta commit) and prints rows/s. With --rate N a writer updates random rows at N
transactions/s during the snapshot, and the replayed change log is checked against the
table at the end (after the normal run catches up).
"""

from __future__ import annotations

import argparse
import os
import random
import tempfile
import threading
import time
from pathlib import Path

from cdc_platform.config.models import InstanceConfig
from cdc_platform.runtime import DestinationRuntime
from cdc_platform.runtime.snapshot import SnapshotProgress, SnapshotRunner, state_path
from cdc_platform.sink import MaintenancePolicy
from cdc_platform.testing.destinations import instance_config
from cdc_platform.testing.mariadb import MariaDBServer
from cdc_platform.testing.replay import replay

TABLE = """CREATE TABLE bench.items (
    id BIGINT PRIMARY KEY, sku VARCHAR(32), qty INT, price DECIMAL(10,2),
    note VARCHAR(200), updated DATETIME(6)
) CHARACTER SET utf8mb4"""


def fill(server: MariaDBServer, rows: int, per_txn: int = 5000) -> None:
    with server.connect("bench", autocommit=False) as conn, conn.cursor() as cur:
        for base in range(1, rows + 1, per_txn):
            n = min(per_txn, rows + 1 - base)
            cur.executemany(
                "INSERT INTO items VALUES (%s, %s, %s, %s, %s, NOW(6))",
                [
                    (i, f"SKU-{i:08d}", i % 97, f"{i % 10000}.25", "n" * (i % 50))
                    for i in range(base, base + n)
                ],
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


def config(server: MariaDBServer, user: str) -> InstanceConfig:
    return instance_config(
        server, user, [r"bench\.items"], server_id=3101, password_env="BENCH_CDC_PASSWORD"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--chunk-size", type=int, default=10_000)
    parser.add_argument("--rate", type=float, default=0.0, help="updates/s during the snapshot")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="cdc-bench-") as tmp:
        root = Path(tmp)
        with MariaDBServer(root / "mariadb") as server:
            user = server.create_replication_user("bench", "bench-pw")
            os.environ["BENCH_CDC_PASSWORD"] = user.password
            server.execute("CREATE DATABASE bench", TABLE)
            started = time.perf_counter()
            fill(server, args.rows)
            print(f"filled {args.rows} rows in {time.perf_counter() - started:.1f} s")
            lake = root / "lake"
            uri = str(lake / "bench" / "changes")
            stop = threading.Event()
            updates: list[int] = []
            thread = None
            if args.rate > 0:
                thread = threading.Thread(
                    target=lambda: updates.append(writer(server, args.rows, args.rate, stop)),
                    daemon=True,
                )
                thread.start()
            last = [0.0]

            def progress(p: SnapshotProgress) -> None:
                if p.seconds - last[0] >= 2 or p.rows_read >= p.estimated_rows:
                    last[0] = p.seconds
                    print(f"  {p.rows_read}/{p.estimated_rows} rows, {p.seconds:.1f} s")

            runner = SnapshotRunner(
                "bench",
                config(server, user.name),
                uri,
                state_path(lake, "bench"),
                chunk_size=args.chunk_size,
                on_progress=progress,
                maintenance=MaintenancePolicy(),
            )
            result = runner.run()
            stop.set()
            if thread is not None:
                thread.join()
            rate = result.rows_written / result.seconds
            print(
                f"snapshot: {result.rows_written} rows in {result.chunks} chunks of "
                f"{args.chunk_size}, {result.seconds:.1f} s = {rate:,.0f} rows/s "
                f"({result.rows_dropped} merged from the binlog, {result.streamed_events} "
                f"binlog events streamed{f', {updates[0]} updates' if updates else ''})"
            )
            if args.rate > 0:
                summary = DestinationRuntime("bench", config(server, user.name), uri).run(
                    exit_when_idle_seconds=1.5
                )
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


if __name__ == "__main__":
    main()
