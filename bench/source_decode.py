"""Binlog decoding throughput: bare mysql-replication vs. BinlogSource.events().

    .venv/bin/python bench/source_decode.py [--rows 200000] [--per-txn 1000]
        [--per-statement 100] [--profile] [--workers N [--repeat K]]

Starts a private MariaDB (binlog ROW/FULL/FULL) in a temporary directory, inserts --rows rows
into a typical OLTP-shaped table, then decodes that binlog range twice in the same run:

(a) bare BinLogStreamReader: every rows event's ``.rows`` (dicts of library values);
(b) BinlogSource.events(): ChangeEvents with lossless JSON images, pk, positions;
(c) BinlogSource.events() with the table filtered out (rows skipped undecoded).

Prints rows/s of both and the ratio (b)/(a). ``--profile`` runs (b) under cProfile and prints
the top functions by own time. (b) decodes in the reader thread (``decode_workers: 1``); with
``--workers N`` it is then repeated --repeat times, alternating with N decode workers and with N
workers that are sent every rows event (none of the small ones decoded in the reader thread,
as before they were): medians of each.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import tempfile
import time
from pathlib import Path

from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

from cdc_platform.config.source import SourceConfig
from cdc_platform.events import EventKind, ResumePosition
from cdc_platform.source import BinlogSource
from cdc_platform.source.stream.decode_pool import DecodePool
from cdc_platform.testing.mariadb import MariaDBServer, ReplicationUser

TABLE = """CREATE TABLE bench.orders (
    id BIGINT PRIMARY KEY, customer_id INT NOT NULL, sku VARCHAR(32) NOT NULL,
    qty SMALLINT NOT NULL, price DECIMAL(12,2) NOT NULL, status ENUM('new','paid','sent'),
    note VARCHAR(200), created DATETIME(6) NOT NULL, updated TIMESTAMP NULL
)"""


def insert_rows(server: MariaDBServer, count: int, per_txn: int, per_statement: int) -> None:
    """Multi-row INSERT statements (one rows event per ~8 KB) in transactions of per_txn."""
    with server.connect("bench", autocommit=False) as conn, conn.cursor() as cur:
        for base in range(1, count + 1, per_txn):
            end = min(base + per_txn, count + 1)
            for first in range(base, end, per_statement):
                values = ",".join(
                    f"({i},{i % 5000},'SKU-{i:08d}',{i % 97},'{i % 10000}.25',"
                    f"'{('new', 'paid', 'sent')[i % 3]}','{'n' * (i % 60)}',NOW(6),NOW())"
                    for i in range(first, min(first + per_statement, end))
                )
                cur.execute(f"INSERT INTO orders VALUES {values}")
            conn.commit()


def bare_decode(server: MariaDBServer, user: ReplicationUser, start: ResumePosition) -> int:
    """All rows from ``start`` to the current end with the bare library; returns the count."""
    stream = BinLogStreamReader(
        connection_settings={
            "host": server.host,
            "port": server.port,
            "user": user.name,
            "passwd": user.password,
        },
        server_id=9001,
        resume_stream=True,
        blocking=False,
        log_file=start.file,
        log_pos=start.pos,
        only_events=[WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent],
        enable_logging=False,
    )
    count = 0
    try:
        for event in stream:
            for _row in event.rows:
                count += 1
    finally:
        stream.close()
    return count


def source_decode(
    config: SourceConfig,
    user: ReplicationUser,
    start: ResumePosition,
    rows: int,
    pool: DecodePool | None = None,
) -> int:
    source = BinlogSource(config, resume=start, password=user.password)
    if pool is not None:
        source._pool = pool  # the same workers with other settings
    count = 0
    stream = source.events()
    try:
        for event in stream:
            if event.kind is EventKind.ROW:
                count += 1
                if count == rows:
                    break
    finally:
        source.stop()
        stream.close()
    return count


def filtered_skip(config: SourceConfig, user: ReplicationUser, start: ResumePosition) -> int:
    """Read past every row with bench.orders filtered out, up to the bench.marker row."""
    source = BinlogSource(config, resume=start, password=user.password)
    stream = source.events()
    try:
        for event in stream:
            if event.kind is EventKind.ROW:
                assert event.table == "marker"
                break
    finally:
        source.stop()
        stream.close()
    return -1


def compare_workers(
    config: SourceConfig,
    user: ReplicationUser,
    start: ResumePosition,
    rows: int,
    *,
    workers: int,
    repeat: int,
) -> None:
    """(b) in the reader thread, with ``workers`` decode workers, and with them sent every
    event, alternating ``repeat`` times (a shared machine drifts); medians."""
    many = config.model_copy(update={"decode_workers": workers})
    rates: dict[str, list[float]] = {"1": [], "N": [], "N, all": []}
    for _ in range(repeat):
        rates["1"].append(timed("(b) 1", rows, lambda: source_decode(config, user, start, rows)))
        rates["N"].append(timed("(b) N", rows, lambda: source_decode(many, user, start, rows)))
        every = DecodePool(workers, inline_bytes=0)
        rates["N, all"].append(
            timed("(b) N, all", rows, lambda: source_decode(many, user, start, rows, every))  # noqa: B023 (called at once, within this iteration)
        )
    for label, values in rates.items():
        rate = statistics.median(values)
        paired = statistics.median(v / one for v, one in zip(values, rates["1"], strict=True))
        print(
            f"median {label:<7} ({workers} workers) {rate:>9,.0f} rows/s; "
            f"median of the ratios to the 1 just before: {paired:.2f}"
        )


def timed(label: str, rows: int, run: object) -> float:
    began = time.perf_counter()
    got = run()
    elapsed = time.perf_counter() - began
    assert got in (rows, -1), f"{label}: decoded {got} rows, expected {rows}"
    rate = rows / elapsed
    print(f"{label:<32} {rows:>8} rows in {elapsed:6.2f} s = {rate:>9,.0f} rows/s")
    return rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--per-txn", type=int, default=1000)
    parser.add_argument("--per-statement", type=int, default=100)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="cdc-bench-") as tmp:
        server = MariaDBServer(Path(tmp))
        with server:
            user = server.create_replication_user("cdc", "cdc-secret")
            server.execute("CREATE DATABASE bench", TABLE)
            start = server.binlog_position()
            began = time.perf_counter()
            insert_rows(server, args.rows, args.per_txn, args.per_statement)
            print(
                f"inserted {args.rows} rows in {time.perf_counter() - began:.1f} s "
                f"({args.per_statement} rows per statement, {args.per_txn} per transaction)"
            )
            config = SourceConfig(
                host=server.host, port=server.port, user=user.name, password_env="UNUSED",
                server_id=9002, include_tables=[r"bench\..*"], decode_workers=1,
            )  # fmt: skip
            bare = timed(
                "(a) bare BinLogStreamReader", args.rows, lambda: bare_decode(server, user, start)
            )
            ours = timed(
                "(b) BinlogSource.events()",
                args.rows,
                lambda: source_decode(config, user, start, args.rows),
            )
            print(f"ratio (b)/(a) = {ours / bare:.2f}")
            if args.workers > 1:
                compare_workers(
                    config, user, start, args.rows, workers=args.workers, repeat=args.repeat
                )
            server.execute("CREATE TABLE bench.marker (id INT PRIMARY KEY)")
            server.execute("INSERT INTO bench.marker VALUES (1)")
            skipping = config.model_copy(update={"include_tables": [r"bench\.marker"]})
            timed(
                "(c) same, bench.orders filtered", args.rows,
                lambda: filtered_skip(skipping, user, start),
            )  # fmt: skip
            if args.profile:
                profile = cProfile.Profile()
                profile.enable()
                source_decode(config, user, start, args.rows)
                profile.disable()
                pstats.Stats(profile).sort_stats("tottime").print_stats(20)


if __name__ == "__main__":
    main()
