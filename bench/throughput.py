"""Pipeline throughput vs. bare binlog decoding, per workload and decode workers; lag; RSS.

    .venv/bin/python bench/throughput.py [--rows 200000] [--wide-rows N] [--workers N]
        [--lag-seconds 20] [--lag-rate 5000] [--workloads insert,update,wide]
        [--store buffer_size=1024,memunit=1024,batch_mode=MEMSIZE]

For each workload, in a private MariaDB (binlog ROW/FULL/FULL), the rows are written once and
that one binlog range is then decoded three ways in the same run:

(a) bare pymysqlreplication: every rows event's ``.rows`` (dicts of library values), nothing
    else (the library's own decoding, no table filter, no freeze_schema);
(b) the whole pipeline (BinlogSource -> EventStore -> DeltaChangeLog commits) with
    ``decode_workers: 1`` (rows decoded in the reader thread);
(c) the same with ``decode_workers: N`` (--workers, default the machine's cores);
(d) with --all-to-workers, (c) again with every rows event sent to the workers (none of the
    small ones decoded in the reader thread, as before they were), columns ``N, all``.

Each pipeline runs in a fresh process, so its peak RSS (and its decode workers' largest) is
its own. Workloads: ``insert`` (bulk inserts of a 7-column table, one 1000-row INSERT a
transaction), ``update`` (multi-row updates of 500 rows a transaction, before and after images),
``wide`` (50 columns with JSON, TEXT, DECIMAL, DATETIME(6); 200 rows a transaction), and
``oltp`` (--rows / 4 single-row INSERT statements, 100 a transaction: one rows event per row).

Then the pipeline runs live while a writer process (bench/steady_writer.py) inserts --lag-rate
rows/s (batches of 100 per transaction); each row carries its insert time, so the change log's
`committed_at` minus it is the commit-to-visible lag; prints p50 / p99 (with the default
decode_workers, auto: one per core; --lag-workers to change it).
"""

# ruff: noqa: E402 -- pandas and numpy are kept out before the imports that would load them

from __future__ import annotations

import argparse
import datetime
import json
import os
import pickle
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from cdc_platform.infra.lean_imports import keep_out_unused_libraries, return_freed_memory

keep_out_unused_libraries()  # as `cdc-platform run` does, before pyarrow would load numpy
return_freed_memory()  # and its allocator settings, before pyarrow and deltalake load

import pyarrow.compute as pc
from deltalake import DeltaTable
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

from cdc_platform.config.instance import InstanceConfig
from cdc_platform.events import ResumePosition
from cdc_platform.runtime import DestinationRuntime
from cdc_platform.sink import DeltaChangeLog
from cdc_platform.sink.destination_lake import DestinationLake
from cdc_platform.sink.term import WriteTerm
from cdc_platform.source.stream.decode_pool import DecodePool
from cdc_platform.testing.destinations import instance_config
from cdc_platform.testing.mariadb import MariaDBServer

ITEMS = """CREATE TABLE bench.items (
    id BIGINT PRIMARY KEY, sku VARCHAR(32), qty INT, price DECIMAL(10,2),
    note VARCHAR(200), t_insert DOUBLE, updated DATETIME(6)
)"""

COUNTERS = """CREATE TABLE bench.counters (
    id BIGINT PRIMARY KEY, n INT NOT NULL, name VARCHAR(32), amount DECIMAL(12,2),
    touched DATETIME(6)
)"""

_WIDE_COLUMNS = (
    [f"i{k} INT" for k in range(10)]
    + [f"v{k} VARCHAR(40)" for k in range(10)]
    + [f"d{k} DECIMAL(12,4)" for k in range(8)]
    + [f"t{k} DATETIME(6)" for k in range(8)]
    + [f"x{k} TEXT" for k in range(6)]
    + [f"j{k} JSON" for k in range(4)]
    + [f"f{k} DOUBLE" for k in range(3)]
)
WIDE = f"CREATE TABLE bench.wide (id BIGINT PRIMARY KEY, {', '.join(_WIDE_COLUMNS)})"


def insert_rows(server: MariaDBServer, start: int, count: int, per_txn: int = 1000) -> None:
    """Bulk inserts: one multi-row INSERT per transaction (rows events of ~8 KB each)."""
    with server.connect("bench", autocommit=False) as conn, conn.cursor() as cur:
        for base in range(start, start + count, per_txn):
            n = min(per_txn, start + count - base)
            now = time.time()
            updated = datetime.datetime.now()
            cur.executemany(  # only %s placeholders: pymysql sends one multi-row INSERT
                "INSERT INTO items VALUES (%s, %s, %s, %s, %s, %s, %s)",
                [
                    (i, f"SKU-{i:08d}", i % 97, f"{i % 10000}.25", "n" * (i % 50), now, updated)
                    for i in range(base, base + n)
                ],
            )
            conn.commit()


def insert_single_rows(server: MariaDBServer, start: int, count: int, per_txn: int = 100) -> None:
    """OLTP-shaped inserts: one row per statement (one rows event per row), 100 a transaction."""
    with server.connect("bench", autocommit=False) as conn, conn.cursor() as cur:
        for base in range(start, start + count, per_txn):
            now = time.time()
            for i in range(base, min(base + per_txn, start + count)):
                cur.execute(
                    "INSERT INTO items VALUES (%s, %s, %s, %s, %s, %s, NOW(6))",
                    (i, f"SKU-{i:08d}", i % 97, f"{i % 10000}.25", "n" * (i % 50), now),
                )
            conn.commit()


def seed_counters(server: MariaDBServer, count: int) -> None:
    with server.connect("bench", autocommit=False) as conn, conn.cursor() as cur:
        for base in range(0, count, 1000):
            cur.executemany(
                "INSERT INTO counters VALUES (%s, 0, %s, '0.00', NOW(6))",
                [(i, f"counter-{i}") for i in range(base, min(base + 1000, count))],
            )
        conn.commit()


def update_rows(server: MariaDBServer, table_rows: int, count: int, per_txn: int = 500) -> None:
    with server.connect("bench", autocommit=False) as conn, conn.cursor() as cur:
        done = 0
        while done < count:
            first = done % table_rows
            n = min(per_txn, count - done, table_rows - first)
            cur.execute(
                "UPDATE counters SET n = n + 1, amount = amount + 1.25, touched = NOW(6) "
                "WHERE id >= %s AND id < %s",
                (first, first + n),
            )
            conn.commit()
            done += n


def insert_wide(server: MariaDBServer, count: int, per_txn: int = 200) -> None:
    placeholders = ", ".join(["%s"] * 50)
    with server.connect("bench", autocommit=False) as conn, conn.cursor() as cur:
        for base in range(0, count, per_txn):
            rows = []
            for i in range(base, min(base + per_txn, count)):
                doc = json.dumps({"id": i, "tags": ["a", "b", str(i % 7)], "price": i / 3})
                rows.append(
                    (i,)
                    + tuple(i * k for k in range(10))
                    + tuple(f"value-{k}-{i}" for k in range(10))
                    + tuple(f"{i % 100000}.{k:04d}" for k in range(8))
                    + tuple(f"2024-0{1 + k % 9}-1{k} 12:34:56.{i % 1000000:06d}" for k in range(8))
                    + tuple("text " * (5 + (i + k) % 40) for k in range(6))
                    + (doc,) * 4
                    + tuple(i / (k + 1) for k in range(3))
                )
            cur.executemany(f"INSERT INTO wide VALUES ({placeholders})", rows)
            conn.commit()


def bare_decode(
    server: MariaDBServer, user: tuple[str, str], start: ResumePosition, rows: int
) -> float:
    """Rows/s of the library decoding every rows event from ``start`` (to ``rows`` rows)."""
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
        blocking=False,
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


def config(
    server: MariaDBServer, user: str, workers: int | str = 1, **store: object
) -> InstanceConfig:
    base = instance_config(
        server, user, [r"bench\..*"], server_id=5002, password_env="BENCH_CDC_PASSWORD", **store
    )
    source = base.source.model_copy(update={"decode_workers": workers})
    return base.model_copy(update={"source": source})


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _descendants_peak_rss_mb() -> float:
    """The largest peak RSS (VmHWM) among this process's descendants: the decode workers
    (children of the forkserver this process started)."""
    parents: dict[int, int] = {}
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            fields = dict(
                line.split(":", 1) for line in status.read_text().splitlines() if ":" in line
            )
            parents[int(status.parent.name)] = int(fields["PPid"])
        except (OSError, KeyError, ValueError):
            continue
    mine, peak = {os.getpid()}, 0.0
    for _ in range(4):  # forkserver -> worker: a few generations suffice
        mine |= {pid for pid, ppid in parents.items() if ppid in mine}
    for pid in mine - {os.getpid()}:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    peak = max(peak, int(line.split()[1]) / 1024)
        except OSError:
            continue
    return peak


def _pipeline_child(
    cfg: InstanceConfig, start: ResumePosition, rows: int, uri: str, inline_bytes: int | None
) -> tuple[float, float, float]:
    if inline_bytes is not None:  # this process's pools decode fewer events in the reader
        defaults = DecodePool.__init__.__kwdefaults__
        assert defaults is not None
        defaults["inline_bytes"] = inline_bytes
    sink = DeltaChangeLog(uri, "throughput")
    sink.commit((), batch_seq=1, resume=start, epoch=0)
    sink.close()
    runtime = DestinationRuntime(
        WriteTerm(
            "throughput", cfg, DestinationLake.at(Path(uri).parent.parent, Path(uri).parent.name)
        ),
        metrics_interval_seconds=3600,
    )
    done = threading.Event()
    began = time.perf_counter()
    finished = [0.0, 0.0]

    def watch() -> None:
        while not done.is_set():
            if runtime.metrics().rows_total >= rows:
                finished[0] = time.perf_counter()
                finished[1] = _descendants_peak_rss_mb()
                runtime.request_stop("all rows committed")
                return
            time.sleep(0.1)  # a faster poll steals the GIL from the pipeline it measures

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    runtime.run(exit_when_idle_seconds=10)
    done.set()
    end = finished[0] or time.perf_counter()
    rate = runtime.metrics().rows_total / (end - began)
    return rate, _peak_rss_mb(), finished[1]


def child_main(job: str) -> None:
    """The pipeline process: arguments and result pickled in the file ``job``; ends without
    interpreter teardown, as the console script does."""
    with open(job, "rb") as f:
        args = pickle.load(f)
    result = _pipeline_child(*args)
    with open(job, "wb") as f:
        pickle.dump(result, f)
    os._exit(0)


def pipeline(
    cfg: InstanceConfig, start: ResumePosition, rows: int, uri: str, inline_bytes: int | None = None
) -> tuple[float, float, float]:
    """(rows/s, peak RSS MB of the pipeline process, largest decode worker's peak RSS MB),
    measured in a fresh process. That process's main module is ``-c`` code importing this one,
    so its decode workers import no more than under the console script (a worker imports the
    parent's main module when it has a file)."""
    with tempfile.NamedTemporaryFile(suffix=".pickle", delete=False) as f:
        pickle.dump((cfg, start, rows, uri, inline_bytes), f)
    code = (
        f"import sys; sys.path.insert(0, {str(Path(__file__).resolve().parent)!r}); "
        f"import throughput; throughput.child_main({f.name!r})"
    )
    try:
        subprocess.run([sys.executable, "-c", code], check=True, timeout=1800)
        with open(f.name, "rb") as result:
            measured: tuple[float, float, float] = pickle.load(result)
    finally:
        os.unlink(f.name)
    return measured


def lag(
    server: MariaDBServer, cfg: InstanceConfig, lake: Path, seconds: float, rate: int
) -> tuple[list[float], float]:
    """Commit-to-visible lag of each row written at ``rate`` rows/s for ``seconds``, and the
    rows per second the writer reached. The writer is a process of its own
    (bench/steady_writer.py): in this one it shared the interpreter lock with the pipeline it
    measures and fell short of the rate."""
    layout = DestinationLake.at(lake, "lag")
    uri = layout.change_log
    runtime = DestinationRuntime(
        WriteTerm("lag", cfg, layout),
        metrics_interval_seconds=3600,
    )
    runner = threading.Thread(target=runtime.run, daemon=True)
    runner.start()
    while not Path(uri).exists():
        time.sleep(0.05)
    time.sleep(0.5)
    writer = Path(__file__).resolve().parent / "steady_writer.py"
    done = subprocess.run(
        [sys.executable, str(writer), server.host, str(server.port), str(seconds), str(rate)],
        capture_output=True,
        text=True,
        check=True,
        timeout=seconds + 120,
    )
    written = json.loads(done.stdout.strip().splitlines()[-1])
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
    return lags, written["rows"] / written["seconds"]


def _store_settings(text: str) -> dict[str, str]:
    """``key=value,...`` -> the store settings they name (validated by StoreConfig)."""
    pairs = [item.split("=", 1) for item in text.split(",") if item]
    if any(len(pair) != 2 for pair in pairs):
        raise argparse.ArgumentTypeError(f"expected key=value,...; got {text!r}")
    return {key.strip(): value.strip() for key, value in pairs}


def workloads(args: argparse.Namespace) -> dict[str, tuple[int, Callable[[MariaDBServer], None]]]:
    """name -> (rows in the binlog range, the writer that makes them)."""
    wide_rows = args.wide_rows or max(1, args.rows // 4)
    oltp_rows = max(1, args.rows // 4)
    seeded = min(args.rows, 50_000)
    return {
        "insert": (args.rows, lambda s: insert_rows(s, 1, args.rows)),
        "update": (args.rows, lambda s: update_rows(s, seeded, args.rows)),
        "wide": (wide_rows, lambda s: insert_wide(s, wide_rows)),
        "oltp": (oltp_rows, lambda s: insert_single_rows(s, 20_000_000, oltp_rows)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--wide-rows", type=int, default=0, help="default: --rows / 4")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--workloads", default="insert,update,wide,oltp")
    parser.add_argument(
        "--all-to-workers",
        action="store_true",
        help="also N workers with every rows event sent to them (none decoded in the reader)",
    )
    parser.add_argument(
        "--store",
        type=_store_settings,
        default={},
        help="store settings of the pipelines, key=value,... (e.g. a small destination's "
        "buffer_size=1024,memunit=1024,batch_mode=MEMSIZE); default: the configuration's",
    )
    parser.add_argument("--lag-seconds", type=float, default=20.0)
    parser.add_argument("--lag-rate", type=int, default=5000)
    parser.add_argument(
        "--lag-workers",
        type=lambda text: text if text == "auto" else int(text),
        default="auto",
        help="decode_workers of the lag run (default: the configuration's default, auto)",
    )
    args = parser.parse_args()
    chosen = args.workloads.split(",")
    with tempfile.TemporaryDirectory(prefix="cdc-bench-") as tmp:
        root = Path(tmp)
        with MariaDBServer(root / "mariadb") as server:
            user = server.create_replication_user("bench", "bench-pw")
            os.environ["BENCH_CDC_PASSWORD"] = user.password
            server.execute("CREATE DATABASE bench", ITEMS, COUNTERS, WIDE)
            seed_counters(server, min(args.rows, 50_000))
            print(
                f"decode workers N = {args.workers}; cores = {os.cpu_count()}; "
                f"store {args.store or 'defaults'}"
            )
            header = (
                f"{'workload':<8} {'rows':>8} {'bare rows/s':>12} {'1 worker':>10} "
                f"{'N workers':>10} {'1/bare':>7} {'N/bare':>7} {'N/1':>6} "
                f"{'RSS 1':>7} {'RSS N':>7} {'worker':>7}"
            )
            if args.all_to_workers:
                header += f" {'N, all':>10} {'all/1':>6}"
            print(header, flush=True)
            for name, (rows, write) in workloads(args).items():
                if name not in chosen:
                    continue
                start = server.binlog_position()
                write(server)
                bare = bare_decode(server, (user.name, user.password), start, rows)
                lake = root / "lake" / name
                one, rss_one, _ = pipeline(
                    config(server, user.name, 1, **args.store),
                    start,
                    rows,
                    str(lake / "one" / "changes"),
                )
                many, rss_many, rss_worker = pipeline(
                    config(server, user.name, args.workers, **args.store),
                    start,
                    rows,
                    str(lake / "many" / "changes"),
                )
                line = (
                    f"{name:<8} {rows:>8} {bare:>12,.0f} {one:>10,.0f} {many:>10,.0f} "
                    f"{one / bare:>7.2f} {many / bare:>7.2f} {many / one:>6.2f} "
                    f"{rss_one:>6.0f}M {rss_many:>6.0f}M {rss_worker:>6.0f}M"
                )
                if args.all_to_workers:
                    every, _, _ = pipeline(
                        config(server, user.name, args.workers, **args.store),
                        start,
                        rows,
                        str(lake / "every" / "changes"),
                        inline_bytes=0,
                    )
                    line += f" {every:>10,.0f} {every / one:>6.2f}"
                print(line, flush=True)
            if args.lag_seconds > 0:
                lags, written_per_second = lag(
                    server,
                    config(server, user.name, args.lag_workers, batch_timeout_seconds=0.1),
                    root / "lake",
                    args.lag_seconds,
                    args.lag_rate,
                )
                lags.sort()
                p50 = statistics.median(lags)
                p99 = lags[min(len(lags) - 1, int(len(lags) * 0.99))]
                print(
                    f"commit-to-visible lag at {args.lag_rate} rows/s over {args.lag_seconds:g} s "
                    f"(writer reached {written_per_second:,.0f} rows/s; "
                    f"{len(lags)} rows, decode_workers {args.lag_workers}): "
                    f"p50 {p50 * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms"
                )


if __name__ == "__main__":
    main()
