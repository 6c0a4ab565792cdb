"""Peak RSS and rows/s of ``cdc-platform run --exit-when-idle`` catching up on a binlog.

    .venv/bin/python bench/run_rss.py [--rows 100000] [--workers 1] [--workload insert]
        [--against REV] [--repeat 1]

In a private MariaDB, writes --rows rows (``insert``: one 1000-row INSERT a transaction into
the 7-column table of bench/throughput.py; ``update``: 500-row updates of it), then runs the
console script (``python -m cdc_platform.cli``, the same :func:`cdc_platform.cli.console`, run
on the code of the checkout this bench lives in) on that binlog range under ``/usr/bin/time -v``
with the default store (16 MiB ring buffer) and prints the process's maximum resident set size,
its decode workers' not included (``time`` reports the largest of the process and its
waited-for children).

With ``--against REV`` the same binlog is caught up on by the code of ``REV`` too (its
``cdc_platform/`` from ``git archive``), alternating with this checkout's, ``--repeat`` times
each: old and new code in one run, as the machine's load moves the figures. The console
script runs in the folder of the code it is meant to run: ``python -m`` puts its working
folder first on ``sys.path``, so started from the checkout it would run the checkout's
``cdc_platform/`` whatever ``PYTHONPATH`` says (earlier ``--against`` runs started from the
checkout's root compared its code with itself).
"""

from __future__ import annotations

import argparse
import io
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from throughput import COUNTERS, ITEMS, insert_rows, seed_counters, update_rows

from cdc_platform.events import ResumePosition
from cdc_platform.testing.destinations import PASSWORD_ENV
from cdc_platform.testing.mariadb import MariaDBServer, ReplicationUser

REPO = Path(__file__).resolve().parent.parent
"""The checkout whose code the bench runs (not the one installed in the venv)."""


def code_of(rev: str, into: Path) -> Path:
    """``cdc_platform/`` of ``rev`` (git archive), unpacked under ``into``."""
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", rev, "cdc_platform"], capture_output=True, check=True
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return into


def console(
    code: Path, argv: Sequence[str], env: Mapping[str, str]
) -> subprocess.CompletedProcess[str]:
    """``python -m cdc_platform.cli`` of the ``cdc_platform/`` in ``code`` under
    ``/usr/bin/time -v``, run in ``code`` (see the module docstring)."""
    return subprocess.run(
        ["/usr/bin/time", "-v", sys.executable, "-m", "cdc_platform.cli", *argv],
        env={**env, "PYTHONPATH": str(code)},
        cwd=code,
        capture_output=True,
        text=True,
        check=False,
    )


def catch_up(
    server: MariaDBServer,
    user: ReplicationUser,
    start: ResumePosition,
    *,
    root: Path,
    code: Path,
    args: argparse.Namespace,
    run: int,
) -> str:
    """One ``run --exit-when-idle`` of ``code`` over the binlog from ``start``: its line."""
    conf, lake = root / f"conf-{run}", root / f"lake-{run}"
    (conf / "destinations" / "d").mkdir(parents=True)
    (conf / "platform.yaml").write_text(f"lake_root: {lake}\n")
    (conf / "destinations" / "d" / "instance.yaml").write_text(
        f"source:\n  host: {server.host}\n  port: {server.port}\n  user: {user.name}\n"
        f"  password_env: {PASSWORD_ENV}\n  server_id: {5003 + run}\n"
        f"  include_tables: ['bench\\..*']\n  decode_workers: {args.workers}\n"
        f"start: {{mode: position, file: {start.file}, pos: {start.pos}}}\n"
    )
    began = time.perf_counter()
    done = console(
        code,
        ["run", "--conf", str(conf), "--destination", "d", "--exit-when-idle", "3"],
        {**os.environ, PASSWORD_ENV: user.password},
    )
    seconds = time.perf_counter() - began - 3
    peak = re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr)
    if done.returncode:
        print(done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr)
    return (
        f"{args.workload}: {args.rows} rows, decode_workers {args.workers}: exit "
        f"{done.returncode}, about {args.rows / seconds:,.0f} rows/s (start-up included), "
        f"peak RSS {int(peak.group(1)) / 1024 if peak else float('nan'):.0f} MB "
        f"(load {os.getloadavg()[0]:.1f})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--workload", choices=["insert", "update"], default="insert")
    parser.add_argument("--against", help="also run the code of this git revision, alternating")
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="cdc-bench-") as tmp:
        root = Path(tmp)
        codes = {"this checkout": REPO}
        if args.against:
            codes[args.against] = code_of(args.against, root / "old")
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
            run = 0
            for _ in range(args.repeat):
                for name, code in reversed(codes.items()):  # the old code first
                    line = catch_up(server, user, start, root=root, code=code, args=args, run=run)
                    print(f"{name}: {line}", flush=True)
                    run += 1


if __name__ == "__main__":
    main()
