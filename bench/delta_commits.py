"""Commit rate and latency of DeltaChangeLog over a long run, with and without maintenance.

Each commit is one batch of ``--rows`` row updates (varied JSON images, ~190 bytes per row
after compression) spread over ``--tables`` tables, so every commit writes one small file per
table partition, as a busy destination does. The policy run uses ``MaintenancePolicy()``; the
baseline uses ``MaintenancePolicy.disabled()`` (delta-rs defaults, one DeltaTable object kept
open). Prints figures only:

    .venv/bin/python bench/delta_commits.py [--commits 1500] [--baseline-commits 400]

Latency is the wall time of ``commit()`` as the pipeline sees it (maintenance included);
"commit only" is ``CommitResult.seconds`` (maintenance excluded). The per-slice medians, with
the elapsed time at the end of each slice, show whether latency stays flat as the table grows
(the log retention of the policy, 15 minutes, only starts deleting after 15 minutes).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import random
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from cdc_platform.events import BinlogPosition, ChangeEvent, EventKind, Op, Transaction
from cdc_platform.sink import DeltaChangeLog, MaintenancePolicy


class MaintenanceTimes(logging.Handler):
    """Collects the sink's debug records "<dest>: <task> took <s> s" per task."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.times: dict[str, list[float]] = {}

    def emit(self, record: logging.LogRecord) -> None:
        if record.msg == "%s: %s took %.3f s" and isinstance(record.args, tuple):
            _, task, seconds = record.args
            self.times.setdefault(str(task), []).append(float(seconds))


@dataclass
class Figures:
    name: str
    commits: int
    total_s: float
    calls: list[float]
    commit_only: list[float]
    ends: list[float]
    files: int
    log_files: int
    recover_s: float
    maintenance: dict[str, list[float]]

    def rate(self) -> float:
        return self.commits / self.total_s


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


_STATUSES = ("new", "paid", "packed", "shipped", "delivered", "returned")


def make_batch(n: int, rows: int, tables: int, pos: int) -> tuple[list[ChangeEvent], int]:
    """One transaction of ``rows`` updates with varied values (so Parquet compresses them as
    it would real rows, not 60:1 as repeated text)."""
    rng = random.Random(n)
    txn = Transaction(
        start=BinlogPosition("mysql-bin.000001", pos),
        gtid=f"0-1-{n}",
        gtid_set_before=f"0-1-{n - 1}" if n > 1 else None,
        server_id=1,
        timestamp=1_700_000_000 + n,
    )
    events: list[ChangeEvent] = []
    for i in range(rows):
        pk = rng.randrange(10**9)
        before = {
            "id": pk,
            "customer_id": rng.randrange(10**6),
            "status": rng.choice(_STATUSES),
            "amount": {"$decimal": f"{rng.randrange(10**6)}.{rng.randrange(100):02d}"},
            "note": rng.randbytes(12).hex(),
            "updated_at": f"2026-01-{rng.randrange(1, 29):02d}T10:{rng.randrange(60):02d}:12",
        }
        after = dict(before, status=rng.choice(_STATUSES), note=rng.randbytes(12).hex())
        pos += 120
        events.append(
            ChangeEvent(
                kind=EventKind.ROW,
                txn=txn,
                position=BinlogPosition("mysql-bin.000001", pos),
                index=i,
                db="shop",
                table=f"orders_{i % tables}",
                op=Op.UPDATE,
                pk=json.dumps({"id": pk}),
                before=json.dumps(before),
                after=json.dumps(after),
            )
        )
    pos += 31
    events.append(
        ChangeEvent(
            kind=EventKind.COMMIT,
            txn=txn,
            position=BinlogPosition("mysql-bin.000001", pos),
            index=rows,
        )
    )
    return events, pos


def run(
    name: str,
    policy: MaintenancePolicy,
    commits: int,
    root: Path,
    batches: list[list[ChangeEvent]],
) -> Figures:
    uri = root / name
    sink = DeltaChangeLog(str(uri), "bench", maintenance=policy)
    times = MaintenanceTimes()
    sink_logger = logging.getLogger("cdc_platform.sink")
    sink_logger.addHandler(times)
    sink_logger.setLevel(logging.DEBUG)
    calls: list[float] = []
    commit_only: list[float] = []
    ends: list[float] = []
    total = 0.0
    run_started = time.perf_counter()
    for n in range(1, commits + 1):
        events = batches[n % len(batches)]
        started = time.perf_counter()
        result = sink.commit(events, batch_seq=n, resume=events[-1].resume_after(), epoch=1)
        ended = time.perf_counter()
        total += ended - started
        calls.append(ended - started)
        ends.append(ended - run_started)
        commit_only.append(result.seconds)
        if n % max(1, commits // 10) == 0:
            print(f"  {name}: {n} commits, {n / total:.1f} commits/s so far", file=sys.stderr)
    sink_logger.removeHandler(times)
    started = time.perf_counter()
    checkpoint = DeltaChangeLog(str(uri), "bench").recover()
    recover_s = time.perf_counter() - started
    assert checkpoint is not None
    assert checkpoint.last_seq == sum(
        len(batches[n % len(batches)]) - 1 for n in range(1, commits + 1)
    )
    files = sum(1 for p in uri.rglob("*.parquet") if "_delta_log" not in p.parts)
    log_files = sum(1 for _ in (uri / "_delta_log").iterdir())
    return Figures(
        name, commits, total, calls, commit_only, ends, files, log_files, recover_s, times.times
    )


def report(figures: Figures, slices: int, compare_first: int) -> None:
    ms = 1000.0
    print(f"{figures.name}:")
    print(
        f"  {figures.rate():.1f} commits/s over {figures.commits} commits "
        f"({figures.total_s:.1f} s in commit())"
    )
    print(
        f"  commit() latency p50 {percentile(figures.calls, 0.5) * ms:.1f} ms, "
        f"p99 {percentile(figures.calls, 0.99) * ms:.1f} ms, "
        f"max {max(figures.calls) * ms:.0f} ms"
    )
    print(
        f"  commit only      p50 {percentile(figures.commit_only, 0.5) * ms:.1f} ms, "
        f"p99 {percentile(figures.commit_only, 0.99) * ms:.1f} ms"
    )
    if 0 < compare_first < figures.commits:
        first = figures.calls[:compare_first]
        print(
            f"  first {compare_first} commits: {compare_first / sum(first):.1f} commits/s, "
            f"p50 {percentile(first, 0.5) * ms:.1f} ms, p99 {percentile(first, 0.99) * ms:.1f} ms"
        )
    size = max(1, len(figures.calls) // slices)
    parts = [
        f"{statistics.median(figures.calls[i : i + size]) * ms:.0f}"
        f"@{figures.ends[min(i + size, len(figures.ends)) - 1]:.0f}s"
        for i in range(0, len(figures.calls), size)
    ]
    print("  p50 (ms) per slice @ elapsed: " + " ".join(parts))
    for task, seconds in sorted(figures.maintenance.items()):
        print(
            f"  {task}: {len(seconds)} runs, mean {statistics.mean(seconds) * ms:.0f} ms, "
            f"max {max(seconds) * ms:.0f} ms"
        )
    print(
        f"  at the end: {figures.files} data files on disk, {figures.log_files} files in "
        f"_delta_log, recover() by a new object {figures.recover_s * ms:.0f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commits", type=int, default=1500, help="commits of the policy run")
    parser.add_argument(
        "--baseline-commits",
        type=int,
        default=400,
        help="commits of the run without maintenance (0: skip); it slows down as it grows",
    )
    parser.add_argument("--rows", type=int, default=1000)
    parser.add_argument("--tables", type=int, default=4)
    parser.add_argument("--compact-every", type=int, default=MaintenancePolicy().compact_every)
    parser.add_argument("--slices", type=int, default=10)
    parser.add_argument("--pool", type=int, default=64, help="distinct batches generated")
    parser.add_argument("--dir", type=Path, default=None, help="keep the tables here")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)

    policy = MaintenancePolicy()
    if args.compact_every != policy.compact_every:
        policy = dataclasses.replace(policy, compact_every=args.compact_every)
    print(f"{args.rows} rows per commit over {args.tables} tables; policy: {policy}")
    # a pool of distinct batches, reused round-robin: generating 1,000 rows costs ~10 ms
    batches: list[list[ChangeEvent]] = []
    pos = 4
    for n in range(1, args.pool + 1):
        events, pos = make_batch(n, args.rows, args.tables, pos)
        batches.append(events)
    runs = [("policy", policy, args.commits)]
    if args.baseline_commits > 0:
        runs.append(("none", MaintenancePolicy.disabled(), args.baseline_commits))
    with tempfile.TemporaryDirectory(prefix="delta-bench-") as tmp:
        root = args.dir or Path(tmp)
        for name, chosen, commits in runs:
            compare = args.baseline_commits if name == "policy" else 0
            report(run(name, chosen, commits, root, batches), args.slices, compare)


if __name__ == "__main__":
    main()
