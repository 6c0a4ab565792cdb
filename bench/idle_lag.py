"""The lag a real `cdc-platform run` reports on an idle source, scraped from its /metrics.

Starts a private MariaDB and one run (SQLite lease, metrics on a free port), commits one
change, rotates the binlog, then leaves the source idle; prints the lag samples (one a
second), how many change-log commits the idle period cost and where the checkpoint is.

.venv/bin/python bench/idle_lag.py --idle 60 [--heartbeat 1] [--idle-checkpoint 10]
"""

from __future__ import annotations

import argparse
import re
import statistics
import tempfile
import time
import urllib.request
from pathlib import Path

from cdc_platform.testing.ha import Cluster, fast_database_lease
from cdc_platform.testing.mariadb import MariaDBServer


def lag(url: str) -> float:
    with urllib.request.urlopen(url, timeout=5) as response:
        text = response.read().decode()
    match = re.search(r'^cdc_source_lag_seconds\{destination="ha"\} (\S+)$', text, re.MULTILINE)
    return float(match.group(1)) if match else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--idle", type=float, default=60.0, help="idle seconds")
    parser.add_argument("--heartbeat", type=float, default=1.0, help="source.heartbeat_seconds")
    parser.add_argument("--idle-checkpoint", type=float, default=10.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="cdc-idle-") as tmp:
        root = Path(tmp)
        with MariaDBServer(root / "mariadb") as server:
            user = server.create_replication_user()
            server.execute("CREATE DATABASE shop", "CREATE TABLE shop.t (id INT PRIMARY KEY)")
            cluster = Cluster(
                root / "work", server, user, "shop", fast_database_lease(f"sqlite:///{tmp}/l.db")
            )
            instance = cluster.conf / "destinations" / cluster.destination / "instance.yaml"
            text = instance.read_text().replace(
                "  reconnect_initial_seconds",
                f"  heartbeat_seconds: {args.heartbeat}\n  reconnect_initial_seconds",
            )
            instance.write_text(
                text + f"sink: {{idle_checkpoint_seconds: {args.idle_checkpoint}}}\n"
            )
            try:
                node = cluster.start("bench", "--metrics-port", "0")
                cluster.wait(lambda: "metrics: " in node.text(), "the metrics endpoint")
                url = re.findall(r"^metrics: (\S+)$", node.text(), re.MULTILINE)[0]
                cluster.wait(lambda: cluster.checkpoint() is not None, "the start position")
                server.execute("INSERT INTO shop.t VALUES (1)")
                cluster.wait(lambda: cluster.rows() == 1, "the row")
                server.execute("FLUSH BINARY LOGS")
                before = cluster.checkpoint()
                assert before is not None
                samples = []
                started = time.monotonic()
                while time.monotonic() - started < args.idle:
                    samples.append(lag(url))
                    time.sleep(1.0)
                after = cluster.checkpoint()
                assert after is not None
                node.stop()
            finally:
                cluster.close()
    print(
        f"idle {args.idle:.0f} s, heartbeat {args.heartbeat:g} s, idle checkpoint "
        f"{args.idle_checkpoint:g} s: lag max {max(samples):.2f} s, median "
        f"{statistics.median(samples):.2f} s over {len(samples)} samples"
    )
    print(
        f"change-log commits while idle: {after.batch_seq - before.batch_seq}; checkpoint "
        f"{before.resume.file}:{before.resume.pos} -> {after.resume.file}:{after.resume.pos}"
    )


if __name__ == "__main__":
    main()
