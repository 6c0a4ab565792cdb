"""kill -9 the active `cdc-platform run` N times; print takeover times and check exactly-once.

.venv/bin/python bench/failover.py --backend zookeeper --trials 10
.venv/bin/python bench/failover.py --backend database --trials 10
.venv/bin/python bench/failover.py --trials 4 --compare HEAD~1 --rounds 2

Two processes run one destination under a continuous workload. Each trial kills the active one,
measures the takeover (from the kill to the standby holding the lease, and to its first commit
of the new epoch), starts a fresh standby, then pauses the workload and checks that the change
log replays to exactly the source. Settings: ZooKeeper tickTime 500 ms (``--tick-ms``) with 2 s
sessions and a 0.5 s switch delay; SQLite database lease with a 2 s expiry renewed every 0.5 s.

``--compare REV`` runs the nodes on the code of git revision REV and on this checkout by turns
(``--rounds`` of each, a fresh cluster every time; the bench itself is this checkout's), and
prints the medians over all trials of each: the figure moves with the machine's load, so old
and new are compared within one run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from deltalake import DeltaTable

from cdc_platform.testing.ha import (
    Cluster,
    commit_history,
    exactly_once_problems,
    fast_zookeeper_lease,
)
from cdc_platform.testing.mariadb import MariaDBServer
from cdc_platform.testing.workload import Workload
from cdc_platform.testing.zookeeper import ZooKeeperServer


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


REPO = Path(__file__).resolve().parent.parent


def run(
    backend: str,
    trials: int,
    rate: float,
    root: Path,
    *,
    code: Path | None = None,
    tick_ms: int = 500,
) -> dict[str, list[float]]:
    """One cluster, ``trials`` kills; the times to the lease and to the first commit, as the
    bench saw them (polling) and as the nodes stamped them (the running node's ``since``, the
    commit's timestamp; same machine, same clock).

    ``code``: a source tree whose ``cdc_platform`` the nodes run (default: the installed one).
    """
    with MariaDBServer(root / "mariadb") as server:
        user = server.create_replication_user()
        server.execute("CREATE DATABASE shop")
        zookeeper = (
            ZooKeeperServer(root / "zookeeper", tick_time_ms=tick_ms)
            if backend == "zookeeper"
            else None
        )
        if zookeeper is not None:
            zookeeper.start()
        try:
            if zookeeper is not None:
                lease = fast_zookeeper_lease(zookeeper.hosts)
            else:
                lease = (
                    "lease:\n  backend: database\n"
                    f"  url: 'sqlite:///{root}/lease.db'\n"
                    "  expiry_seconds: 2\n  renew_interval_seconds: 0.5\n"
                )
            env = {} if code is None else {"PYTHONPATH": str(code)}
            cluster = Cluster(root / "work", server, user, "shop", lease, extra_env=env)
            try:
                return trial_loop(cluster, Workload(server, "shop", seed=5), trials, rate)
            finally:
                cluster.close()
        finally:
            if zookeeper is not None:
                zookeeper.stop()


def trial_loop(
    cluster: Cluster, workload: Workload, trials: int, rate: float
) -> dict[str, list[float]]:
    workload.create_schema()
    active = cluster.start("node-0")
    epoch = cluster.wait_holder(active).epoch
    cluster.wait(lambda: cluster.checkpoint() is not None, "the first commit")
    standby = cluster.start("node-1")
    cluster.wait(lambda: "standby" in standby.text(), "the standby")
    to_lease: list[float] = []
    to_commit: list[float] = []
    stamped: dict[str, list[float]] = {"lease": [], "commit": []}
    exact = 0
    for trial in range(1, trials + 1):
        workload.start(rate_per_second=rate)
        cluster.wait_rows_beyond(cluster.rows())
        killed_at, killed_wall = time.monotonic(), time.time()
        active.kill()
        held = cluster.wait_holder(standby, above=epoch, timeout=120)
        to_lease.append(time.monotonic() - killed_at)
        cluster.wait_claimed(held.epoch, timeout=120)
        to_commit.append(time.monotonic() - killed_at)
        epoch = held.epoch
        stamped["lease"].append((held.since or killed_wall) - killed_wall)
        stamped["commit"].append(first_commit_time(cluster.uri, epoch) - killed_wall)
        active, standby = standby, cluster.start(f"node-{trial + 1}")
        cluster.wait(lambda node=standby: "standby" in node.text(), "the new standby")
        workload.stop()
        cluster.wait_caught_up()
        problems = exactly_once_problems(cluster.server, cluster.database, cluster.uri)
        epochs = [c.epoch for c in commit_history(cluster.uri)]
        if epochs != sorted(epochs):
            problems.append("an older epoch committed after a newer one")
        exact += not problems
        print(
            f"trial {trial}: lease after {to_lease[-1]:.2f} s, first commit after "
            f"{to_commit[-1]:.2f} s (stamped: {stamped['lease'][-1]:.2f} s, "
            f"{stamped['commit'][-1]:.2f} s), epoch {epoch}, "
            f"{'exactly-once' if not problems else 'PROBLEMS: ' + '; '.join(problems)}",
            flush=True,
        )
    print(
        f"takeover to lease:  p50 {statistics.median(to_lease):.2f} s  "
        f"p95 {percentile(to_lease, 0.95):.2f} s  max {max(to_lease):.2f} s"
    )
    print(
        f"takeover to commit: p50 {statistics.median(to_commit):.2f} s  "
        f"p95 {percentile(to_commit, 0.95):.2f} s  max {max(to_commit):.2f} s"
    )
    print(
        f"stamped by the nodes: lease p50 {statistics.median(stamped['lease']):.2f} s, "
        f"commit p50 {statistics.median(stamped['commit']):.2f} s"
    )
    print(f"exactly-once after {exact}/{trials} trials; workload: {workload.stats.committed} txns")
    return {
        "lease (seen)": to_lease,
        "commit (seen)": to_commit,
        "lease (stamped)": stamped["lease"],
        "commit (stamped)": stamped["commit"],
    }


def first_commit_time(uri: str, epoch: int) -> float:
    """Wall time (the writer's clock, ms) of the first change-log commit of ``epoch``."""
    return min(
        int(info["timestamp"]) / 1000.0
        for info in DeltaTable(uri).history()
        if info.get("cdc.epoch") is not None and int(info["cdc.epoch"]) == epoch
    )


def compare(args: argparse.Namespace, tmp: Path) -> None:
    """Old (``args.compare``) and new code by turns in one run; medians of each."""
    old = tmp / "old"
    old.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", args.compare, "cdc_platform"],
        check=True,
        capture_output=True,
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(old)], input=archive, check=True)
    results: dict[str, dict[str, list[float]]] = {"old": {}, "new": {}}
    for round_ in range(args.rounds):
        for label, code in (("old", old), ("new", REPO)):
            print(f"--- round {round_ + 1}, {label} code", flush=True)
            os.chdir(code)  # `python -m` puts the working directory first on the nodes' path
            times = run(
                args.backend,
                args.trials,
                args.rate,
                tmp / f"{label}{round_}",
                code=code,
                tick_ms=args.tick_ms,
            )
            for what, values in times.items():
                results[label].setdefault(what, []).extend(values)
    for label, times in results.items():
        name = args.compare if label == "old" else "checkout"
        figures = "; ".join(
            f"{what} p50 {statistics.median(v):.2f} s max {max(v):.2f} s"
            for what, v in times.items()
        )
        print(f"{label} ({name}, {len(times['lease (seen)'])} trials): {figures}")
    print(f"load average at the end: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--backend", choices=["zookeeper", "database"], default="zookeeper")
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--rate", type=float, default=40.0, help="workload transactions/s")
    parser.add_argument("--compare", metavar="REV", help="also run git revision REV, by turns")
    parser.add_argument("--rounds", type=int, default=2, help="turns of each with --compare")
    parser.add_argument(
        "--tick-ms",
        type=int,
        default=500,
        help="ZooKeeper's tickTime: session expiry is rounded up to the next tick",
    )
    parser.add_argument("--keep", type=Path, help="work in this new directory and keep its logs")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="cdc-failover-") as tmp:
        root = Path(tmp) if args.keep is None else args.keep
        root.mkdir(parents=True, exist_ok=True)
        if args.compare:
            compare(args, root)
        else:
            run(args.backend, args.trials, args.rate, root, tick_ms=args.tick_ms)


if __name__ == "__main__":
    main()
