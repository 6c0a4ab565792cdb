"""What a DDL that changes rows costs: the re-read after ALTER TABLE ... ADD COLUMN ... DEFAULT.

    .venv/bin/python bench/ddl_reread.py [--rows 100000] [--chunk-size 10000] [--rate 50]

Fills a table in a private MariaDB with --rows rows, starts the destination under its lease
(as `cdc-platform run` does) and lets it catch up, then runs
``ALTER TABLE items ADD COLUMN color VARCHAR(16) DEFAULT 'red'`` while a writer updates
random rows at --rate transactions/s. Prints how long the re-read took (rows/s), and the
delay of the writer's changes during it: from each UPDATE's commit at the source to its row
in the change log (p50 / p99 / max), since the stream pauses while the table is copied.
At the end it checks that the change log holds 'red' for every row.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import tempfile
import threading
import time
from pathlib import Path

import pyarrow.compute as pc
from deltalake import DeltaTable

from cdc_platform.config import load_config
from cdc_platform.runtime.supervised import supervised_destination
from cdc_platform.sink.destination_lake import DestinationLake
from cdc_platform.testing.destinations import PASSWORD_ENV, write_conf
from cdc_platform.testing.mariadb import MariaDBServer

TABLE = """CREATE TABLE items (
    id BIGINT PRIMARY KEY, sku VARCHAR(32), qty INT, note VARCHAR(100), mark BIGINT
) CHARACTER SET utf8mb4"""


def fill(server: MariaDBServer, rows: int, per_txn: int = 5000) -> None:
    with server.connect("bench", autocommit=False) as conn, conn.cursor() as cur:
        for base in range(1, rows + 1, per_txn):
            n = min(per_txn, rows + 1 - base)
            cur.executemany(
                "INSERT INTO items VALUES (%s, %s, %s, %s, 0)",
                [(i, f"SKU-{i:08d}", i % 97, "n" * (i % 50)) for i in range(base, base + n)],
            )
            conn.commit()


def writer(
    server: MariaDBServer, rows: int, rate: float, stop: threading.Event, sent: dict[int, float]
) -> None:
    """UPDATE random rows, each with a unique mark; note when each committed."""
    rng = random.Random(5)
    mark = 0
    with server.connect("bench") as conn, conn.cursor() as cur:
        while not stop.is_set():
            mark += 1
            cur.execute("UPDATE items SET mark = %s WHERE id = %s", (mark, rng.randint(1, rows)))
            sent[mark] = time.time()
            stop.wait(1.0 / rate)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--chunk-size", type=int, default=10_000)
    parser.add_argument("--rate", type=float, default=50.0, help="updates/s during the re-read")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="cdc-bench-") as tmp:
        root = Path(tmp)
        with MariaDBServer(root / "mariadb") as server:
            user = server.create_replication_user("bench", "bench-pw")
            os.environ[PASSWORD_ENV] = user.password
            server.execute("CREATE DATABASE bench")
            conf, lake = root / "conf", root / "lake"
            write_conf(
                conf, destination="bench", server=server, user=user, database="bench",
                lake_root=lake, server_id=3001,
                extra_platform=f"lease: {{backend: database, url: 'sqlite:///{root}/l.db'}}\n",
            )  # fmt: skip
            instance = conf / "destinations" / "bench" / "instance.yaml"
            instance.write_text(
                instance.read_text().replace("buffer_size: 1024", "buffer_size: 16384")
                .replace("batch_size: 64", "batch_size: 4096")
                + f"snapshot: {{chunk_size: {args.chunk_size}}}\n"
            )  # fmt: skip
            config = load_config(conf)
            assert not config.errors, config.errors
            with supervised_destination(config, config.destinations["bench"]) as supervisor:
                runner = threading.Thread(
                    target=lambda: supervisor.run(exit_when_idle_seconds=5.0), daemon=True
                )
                runner.start()
                time.sleep(1.0)  # the first start pins the position before the table exists
                server.execute(TABLE, database="bench")
                started = time.perf_counter()
                fill(server, args.rows)
                print(f"filled {args.rows} rows in {time.perf_counter() - started:.1f} s")
                time.sleep(2.0)
                stop = threading.Event()
                sent: dict[int, float] = {}
                writing = threading.Thread(
                    target=writer, args=(server, args.rows, args.rate, stop, sent), daemon=True
                )
                writing.start()
                time.sleep(1.0)
                listed = DestinationLake.at(lake, "bench").reread_tables
                began = time.perf_counter()
                server.execute(
                    "ALTER TABLE items ADD COLUMN color VARCHAR(16) DEFAULT 'red'",
                    database="bench",
                )
                while not listed.exists() and time.perf_counter() - began < 30:
                    time.sleep(0.01)
                while listed.exists():
                    time.sleep(0.05)
                reread = time.perf_counter() - began
                time.sleep(1.0)
                stop.set()
                writing.join()
                runner.join(timeout=300)
        log = (
            DeltaTable(str(lake / "bench" / "changes"))
            .to_pyarrow_table(columns=["seq", "op", "after", "committed_at"])
            .sort_by("seq")
        )
        rows = log.filter(pc.field("op") == "r").to_pylist()
        print(
            f"re-read of {args.rows} rows after the ALTER: {reread:.1f} s "
            f"({len(rows) / reread:,.0f} rows/s incl. the pause and restart of the stream)"
        )
        landed: dict[int, float] = {}
        for row in log.filter(pc.field("op") == "u").to_pylist():
            mark = json.loads(row["after"])["mark"]
            landed.setdefault(mark, row["committed_at"].timestamp())
        delays = sorted(landed[m] - sent[m] for m in sent if m in landed)
        p99 = delays[int(len(delays) * 0.99) - 1] if delays else float("nan")
        print(
            f"writer: {len(sent)} updates, {len(delays)} in the log; source commit -> change "
            f"log p50 {statistics.median(delays):.2f} s, p99 {p99:.2f} s, max {delays[-1]:.2f} s"
        )
        latest: dict[int, str | None] = {}
        for row in log.filter(pc.field("op").isin(["c", "u", "r"])).to_pylist():
            image = json.loads(row["after"])
            latest[image["id"]] = image.get("color")
        red = sum(1 for c in latest.values() if c == "red")
        print(f"rows whose newest image has color 'red': {red} of {len(latest)}")


if __name__ == "__main__":
    main()
