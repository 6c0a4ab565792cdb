"""Change-log commits into S3 (a private SeaweedFS) vs local disk: rows/s, latency, flatness.

    .venv/bin/python bench/s3_commits.py [--transactions 6000] [--batch-size 128]

Runs one random OLTP workload (cdc_platform.testing.workload, fixed seed) into a private
MariaDB, then streams that same binlog range through the whole pipeline (BinlogSource ->
EventStore -> DeltaChangeLog with the default maintenance policy) twice in one run: into a
local lake and into ``s3://lake/...`` on a private SeaweedFS (conditional puts, as in
production). Each prints rows/s (first row read to last commit), the per-commit latency
p50 / p99 as the sink measures it, and the p50 of the first vs the last 10% of commits: flat
latency over the run means the last 10% are not slower than the first.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from cdc_platform.config.batch_mode import BatchMode
from cdc_platform.config.lake import LakeLocation
from cdc_platform.events import ResumePosition
from cdc_platform.runtime import DestinationRuntime
from cdc_platform.sink.report import CommitReport
from cdc_platform.sink.term import WriteTerm
from cdc_platform.testing.destinations import instance_config
from cdc_platform.testing.mariadb import MariaDBServer
from cdc_platform.testing.seaweedfs import SeaweedFSServer
from cdc_platform.testing.workload import Workload


@dataclass
class Run:
    """What one pipeline run committed, in commit order."""

    name: str
    started: float = 0.0
    reports: list[CommitReport] = field(default_factory=list)
    finished: list[float] = field(default_factory=list)

    def on_commit(self, report: CommitReport) -> None:
        self.reports.append(report)
        self.finished.append(time.perf_counter())

    def rows(self) -> int:
        return sum(r.rows for r in self.reports)

    def summary(self) -> str:
        latencies = [r.commit_seconds * 1000 for r in self.reports]
        ordered = sorted(latencies)
        tenth = max(1, len(latencies) // 10)
        p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
        rate = self.rows() / (self.finished[-1] - self.started)
        return (
            f"{self.name:>6}: {self.rows():,} rows, {len(latencies)} commits, {rate:,.0f} rows/s; "
            f"commit p50 {statistics.median(latencies):.0f} ms, p99 {p99:.0f} ms; "
            f"p50 first 10% {statistics.median(latencies[:tenth]):.0f} ms, "
            f"last 10% {statistics.median(latencies[-tenth:]):.0f} ms\n"
            f"        p50 per tenth of the run: {self.tenths(latencies)}"
        )

    @staticmethod
    def tenths(latencies: list[float]) -> str:
        size = max(1, len(latencies) // 10)
        parts = [latencies[i : i + size] for i in range(0, len(latencies), size)]
        return " ".join(f"{statistics.median(p):.0f}" for p in parts[:10]) + " ms"


def pipeline(  # noqa: PLR0917 (one run's inputs)
    name: str,
    server: MariaDBServer,
    user: str,
    lake: LakeLocation,
    start: ResumePosition,
    batch_size: int,
) -> Run:
    """Stream from ``start`` into ``lake`` until the source is idle (the time to the last
    commit is what counts)."""
    config = instance_config(
        server,
        user,
        [r"bench\..*"],
        server_id=5003,
        password_env="BENCH_CDC_PASSWORD",
        batch_mode=BatchMode.ITEMSIZE,
        batch_size=batch_size,
        buffer_size=8192,
    )
    run = Run(name)
    term = WriteTerm.in_lake(name, config, lake, on_commit=run.on_commit)
    pin = term.layout.open_change_log()
    pin.commit((), batch_seq=1, resume=start, epoch=0)  # the start position
    pin.close()
    runtime = DestinationRuntime(term, metrics_interval_seconds=3600)
    run.started = time.perf_counter()
    runtime.run(exit_when_idle_seconds=3)
    return run


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--transactions", type=int, default=6000)
    parser.add_argument("--batch-size", type=int, default=128, help="events per commit")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="cdc-bench-") as tmp:
        root = Path(tmp)
        with MariaDBServer(root / "mariadb") as server, SeaweedFSServer(root / "s3") as s3:
            user = server.create_replication_user("bench", "bench-pw")
            os.environ["BENCH_CDC_PASSWORD"] = user.password
            os.environ.update(s3.environment())
            server.execute("CREATE DATABASE bench")
            workload = Workload(server, "bench", seed=7)
            workload.create_schema()
            start = server.binlog_position()
            workload.run_transactions(args.transactions)
            local = LakeLocation.resolve(str(root / "lake"), root, environ=os.environ)
            remote = LakeLocation.resolve(f"s3://{s3.bucket}/bench", root, environ=os.environ)
            runs = [
                pipeline("local", server, user.name, local, start, args.batch_size),
                pipeline("s3", server, user.name, remote, start, args.batch_size),
            ]
            print(f"workload: {args.transactions} transactions, {args.batch_size} events/commit")
            for run in runs:
                print(run.summary())


if __name__ == "__main__":
    main()
