"""The fixed cost of one small mirror apply on each engine: what a per-table asset pays per run.

    .venv/bin/python bench/apply_cost.py [--applies 8] [--changes 20] [--engines embedded,classic]
                                         [--code DIR ...]

Each engine runs in its own process (PySpark picks Spark Connect or classic per process): one
change log (delta-rs), then ``--applies`` rounds of ``--changes`` changes (60 % inserts, 40 %
updates) each followed by ``apply_changes`` (the first is the rebuild; one round adds a column,
so one later apply is a rebuild too). Prints, per engine, the median seconds of the merges and
the CPU seconds of the whole run in the engine's JVM (classic) or the process (embedded).

``--code`` runs the same with another checkout of the project first on ``PYTHONPATH`` (e.g. a
``git worktree`` of an older commit), so old and new code are compared in one run on the same
machine load. Prints figures only.
"""

# ruff: noqa: PLC0415 (each engine runs in its own process and imports only what it needs)

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

ENGINES = ("embedded", "classic")


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _java_child(work: Path) -> int | None:
    """The classic engine's JVM: the child of this process whose command line names ``work``."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if "java" in cmdline and str(work) in cmdline:
            return int(proc.name)
    return None


def child(engine: str, applies: int, changes: int) -> None:
    """Run in the engine's own process; print one JSON line of figures."""
    from cdc_platform.config.platform import SparkConfig
    from cdc_platform.spark.mirror import apply_changes
    from cdc_platform.spark.session import SparkSessionFactory
    from cdc_platform.spark.target import MirrorTarget
    from cdc_platform.testing.spark_changes import ChangeLogWriter, SourceTable, column
    from cdc_platform.testing.spark_connect import SMALL_LOCAL_CONF

    work = Path(tempfile.mkdtemp(prefix=f"apply-cost-{engine}-"))
    if engine == "classic":
        conf = {
            **SMALL_LOCAL_CONF,
            "spark.sql.warehouse.dir": str(work / "warehouse"),
            "spark.local.dir": str(work),
        }
        config = SparkConfig(mode="classic", master="local[2]", conf=conf)
    else:
        config = SparkConfig()
    factory = SparkSessionFactory(config)
    spark = factory.session()
    pid = (_java_child(work) if engine == "classic" else None) or os.getpid()
    cpu_start = _cpu_seconds(pid)
    rng = random.Random(1)
    orders = SourceTable(
        "shop",
        "orders",
        [column("id", "bigint", pk=True), column("status", "varchar", length=64),
         column("n", "int")],
    )  # fmt: skip
    log = ChangeLogWriter(str(work / "changes"))
    next_id = 1
    seconds: dict[str, list[float]] = {"merge": [], "rebuild": [], "noop": []}
    for round_ in range(applies):
        events = []
        for _ in range(changes):
            if rng.random() < 0.6 or len(orders.rows) < 3:
                events.append(orders.insert({"id": next_id, "status": "new", "n": 1}))
                next_id += 1
            else:
                key = rng.choice(list(orders.rows))
                events.append(orders.update(key, status=f"v{rng.randint(0, 99)}"))
        if round_ == applies // 2:
            events.append(orders.add_column(column("note", "text"), "TEXT"))
        now = datetime.now(UTC)
        log.commit(events, ts=now, committed_at=now)
        started = time.perf_counter()
        result = apply_changes(spark, MirrorTarget(log.uri, str(work / "mirror"), "shop", "orders"))
        seconds[result.mode].append(time.perf_counter() - started)
        if result.mirror_rows != len(orders.rows):
            raise SystemExit(f"{engine}: {result.mirror_rows} rows, want {len(orders.rows)}")
    figures = {
        "merges": len(seconds["merge"]),
        "merge_median_s": statistics.median(seconds["merge"]),
        "rebuild_median_s": statistics.median(seconds["rebuild"]),
        "cpu_s": _cpu_seconds(pid) - cpu_start,
        "code": str(Path(sys.modules["cdc_platform"].__file__ or "").parents[1]),
    }
    print("FIGURES " + json.dumps(figures), flush=True)
    factory.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--applies", type=int, default=8)
    parser.add_argument("--changes", type=int, default=20)
    parser.add_argument("--engines", default=",".join(ENGINES))
    parser.add_argument("--code", action="append", default=[], help="another checkout to time")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.applies, args.changes)
        return
    here = str(Path(__file__).resolve().parents[1])
    rows = []
    for code in [here, *(str(Path(c).resolve()) for c in args.code)]:
        for engine in args.engines.split(","):
            env = {k: v for k, v in os.environ.items() if not k.startswith("SPARK_")}
            env["PYTHONPATH"] = code
            command = [sys.executable, __file__, "--child", engine, "--applies", str(args.applies),
                       "--changes", str(args.changes)]  # fmt: skip
            done = subprocess.run(
                command, env=env, capture_output=True, text=True, check=False, cwd=code
            )
            line = next((x for x in done.stdout.splitlines() if x.startswith("FIGURES ")), None)
            if done.returncode != 0 or line is None:
                print(f"{engine} ({code}) failed:\n{done.stderr[-3000:]}", file=sys.stderr)
                continue
            figures = json.loads(line.removeprefix("FIGURES "))
            if figures["code"] != code:
                print(f"{engine}: imported {figures['code']}, not {code}", file=sys.stderr)
                continue
            rows.append((code, engine, figures))
    load = os.getloadavg()[0]
    print(f"load average {load:.1f}; {args.applies} applies of {args.changes} changes each")
    print("| code | engine | merges | merge median s | rebuild median s | CPU s (run) |")
    print("|---|---|---|---|---|---|")
    for code, engine, f in rows:
        print(
            f"| {code} | {engine} | {f['merges']} | {f['merge_median_s']:.2f} | "
            f"{f['rebuild_median_s']:.2f} | {f['cpu_s']:.1f} |"
        )


if __name__ == "__main__":
    main()
