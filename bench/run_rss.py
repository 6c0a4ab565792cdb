"""Peak RSS and rows/s of ``cdc-platform run --exit-when-idle`` catching up on a binlog.

    .venv/bin/python bench/run_rss.py [--rows 100000] [--workers 1] [--workload insert]

In a private MariaDB, writes --rows rows (``insert``: one 1000-row INSERT a transaction into
the 7-column table of bench/throughput.py; ``update``: 500-row updates of it), then runs the
console script (``python -m cdc_platform.cli``, the same :func:`cdc_platform.cli.console`, run
on the code of the checkout this bench lives in) on that binlog range under ``/usr/bin/time -v``
with the default store (16 MiB ring buffer) and prints the process's maximum resident set size,
its decode workers' not included (``time`` reports the largest of the process and its
waited-for children).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from throughput import COUNTERS, ITEMS, insert_rows, seed_counters, update_rows

from cdc_platform.testing.destinations import PASSWORD_ENV
from cdc_platform.testing.mariadb import MariaDBServer

REPO = Path(__file__).resolve().parent.parent
"""The checkout whose code the bench runs (not the one installed in the venv)."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--workload", choices=["insert", "update"], default="insert")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="cdc-bench-") as tmp:
        root = Path(tmp)
        with MariaDBServer(root / "mariadb") as server:
            user = server.create_replication_user("bench", "bench-pw")
            server.execute("CREATE DATABASE bench", ITEMS, COUNTERS)
            if args.workload == "update":
                seed_counters(server, min(args.rows, 50_000))
            start = server.binlog_position()
            if args.workload == "insert":
                insert_rows(server, 0, args.rows)
            else:
                update_rows(server, min(args.rows, 50_000), args.rows)
            conf = root / "conf"
            (conf / "destinations" / "d").mkdir(parents=True)
            (conf / "platform.yaml").write_text(f"lake_root: {root / 'lake'}\n")
            (conf / "destinations" / "d" / "instance.yaml").write_text(
                f"source:\n  host: {server.host}\n  port: {server.port}\n  user: {user.name}\n"
                f"  password_env: {PASSWORD_ENV}\n  server_id: 5003\n"
                f"  include_tables: ['bench\\..*']\n  decode_workers: {args.workers}\n"
                f"start: {{mode: position, file: {start.file}, pos: {start.pos}}}\n"
            )
            env = {**os.environ, PASSWORD_ENV: user.password, "PYTHONPATH": str(REPO)}
            began = time.perf_counter()
            done = subprocess.run(
                ["/usr/bin/time", "-v", sys.executable, "-m", "cdc_platform.cli", "run",
                 "--conf", str(conf), "--destination", "d", "--exit-when-idle", "3"],
                env=env, capture_output=True, text=True, check=False,
            )  # fmt: skip
            seconds = time.perf_counter() - began - 3
            peak = re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr)
            print(done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr)
            print(
                f"{args.workload}: {args.rows} rows, decode_workers {args.workers}: exit "
                f"{done.returncode}, about {args.rows / seconds:,.0f} rows/s (start-up included), "
                f"peak RSS {int(peak.group(1)) / 1024 if peak else float('nan'):.0f} MB"
            )


if __name__ == "__main__":
    main()
