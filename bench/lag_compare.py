"""Commit-to-visible lag at a steady rate: this checkout's code against another revision's.

    .venv/bin/python bench/lag_compare.py [--against REV] [--repeat 3] [--seconds 20]
        [--rate 5000] [--workers auto]

Each run is the lag run of bench/throughput.py (a writer process of its own,
bench/steady_writer.py, inserts --rate rows/s, 100 a transaction, each row carrying its insert
time; the pipeline runs with ``batch_timeout_seconds: 0.1`` and the default decode workers; the
lag of a row is its ``committed_at`` minus its insert time), in a child process with a private
MariaDB of its own, whose ``cdc_platform`` is this checkout's or, with ``--against``, that
revision's (from ``git archive``), the two alternating ``--repeat`` times: old and new code in
one run, as the machine's load moves the figures. Prints p50 / p90 / p99 / max, the rows per
second the writer reached, the batches with the largest lag, whose numbers show what held them
back (a compaction is due after every 25th commit), and for each compaction the time from the
append before it to the append after it in the change log's history (what the rows behind it
waited).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from run_rss import code_of

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent


def child(seconds: float, rate: int, workers: str) -> None:
    """One lag run in this process (its ``cdc_platform`` is whatever PYTHONPATH names)."""
    # throughput first: it keeps numpy out and sets the allocators before pyarrow loads, as
    # the console script does; the child's imports follow its PYTHONPATH.
    throughput = importlib.import_module("throughput")
    import pyarrow.compute as pc  # noqa: PLC0415 (after throughput)
    from deltalake import DeltaTable  # noqa: PLC0415 (after throughput)

    from cdc_platform.testing.mariadb import MariaDBServer  # noqa: PLC0415 (after throughput)

    with tempfile.TemporaryDirectory(prefix="cdc-lag-") as tmp:
        root = Path(tmp)
        with MariaDBServer(root / "mariadb") as server:
            user = server.create_replication_user("bench", "bench-pw")
            os.environ["BENCH_CDC_PASSWORD"] = user.password
            server.execute("CREATE DATABASE bench", throughput.ITEMS)
            workers_value: int | str = workers if workers == "auto" else int(workers)
            cfg = throughput.config(server, user.name, workers_value, batch_timeout_seconds=0.1)
            lags, written_per_second = throughput.lag(server, cfg, root / "lake", seconds, rate)
            lags.sort()
            table = DeltaTable(str(root / "lake" / "lag" / "changes"))
            history = sorted(table.history(), key=lambda h: int(h["version"]))
            marks = [(h["timestamp"], h.get("cdc.operation") == "compaction") for h in history]
            stalls = [
                marks[i + 1][0] - marks[i - 1][0]
                for i in range(1, len(marks) - 1)
                if marks[i][1] and not marks[i - 1][1] and not marks[i + 1][1]
            ]
            rows = table.to_pyarrow_table(columns=["op", "after", "committed_at", "batch_seq"])
            rows = rows.filter(pc.equal(rows["op"], "c"))
            worst: dict[int, float] = {}
            for after, committed, batch in zip(
                rows["after"].to_pylist(),
                rows["committed_at"].to_pylist(),
                rows["batch_seq"].to_pylist(),
                strict=True,
            ):
                lag = committed.timestamp() - json.loads(after)["t_insert"]
                worst[batch] = max(worst.get(batch, 0.0), lag)
    n = len(lags)
    top = sorted(worst.items(), key=lambda item: -item[1])[:6]
    print(
        json.dumps(
            {
                "rows": n,
                "written_per_second": written_per_second,
                "p50": statistics.median(lags),
                "p90": lags[int(n * 0.9)],
                "p99": lags[min(n - 1, int(n * 0.99))],
                "max": lags[-1],
                "worst": [[batch, round(lag * 1000)] for batch, lag in top],
                "stalls": stalls,
            }
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--against", help="also run the code of this git revision, alternating")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--rate", type=int, default=5000)
    parser.add_argument("--workers", default="auto")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="cdc-lag-code-") as tmp:
        codes = {"this checkout": REPO}
        if args.against:
            codes[args.against] = code_of(args.against, Path(tmp))
        for _ in range(args.repeat):
            for name, code in reversed(codes.items()):  # the old code first
                script = (
                    f"import sys; sys.path.insert(0, {str(BENCH)!r}); import lag_compare; "
                    f"lag_compare.child({args.seconds!r}, {args.rate!r}, {args.workers!r})"
                )
                done = subprocess.run(
                    [sys.executable, "-c", script],
                    env={**os.environ, "PYTHONPATH": str(code)},
                    cwd=code,  # `python -c` puts its working folder first on sys.path
                    capture_output=True,
                    text=True,
                    check=False,
                )
                if done.returncode:
                    print(f"{name}: failed\n{done.stderr[-2000:]}", flush=True)
                    continue
                r = json.loads(done.stdout.strip().splitlines()[-1])
                print(
                    f"{name}: {r['written_per_second']:,.0f} rows/s written, lag p50 "
                    f"{r['p50'] * 1000:.0f} ms, p90 {r['p90'] * 1000:.0f}, p99 "
                    f"{r['p99'] * 1000:.0f}, max {r['max'] * 1000:.0f} (load "
                    f"{os.getloadavg()[0]:.1f}); worst batches (batch, ms): {r['worst']}; "
                    f"append to append around each compaction (ms): {r['stalls']}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
