"""kill -9 `cdc-platform run` many times under a random workload; print what the replay found.

.venv/bin/python bench/crash_kill.py --kills 50
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from cdc_platform.testing.crash import kill_cycle
from cdc_platform.testing.mariadb import MariaDBServer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--kills", type=int, default=50)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="cdc-crash-") as tmp:
        root = Path(tmp)
        with MariaDBServer(root / "mariadb") as server:
            user = server.create_replication_user()
            server.execute("CREATE DATABASE shop")
            started = time.monotonic()
            report = kill_cycle(
                server, user, "shop", root / "work", kills=args.kills, seed=args.seed
            )
            elapsed = time.monotonic() - started
    r = report.replay
    assert r is not None
    print(
        f"kills: {report.kills}  committed transactions: {report.transactions}  "
        f"change-log rows: {r.rows}  wall: {elapsed:.0f} s"
    )
    print(
        f"duplicates: {len(r.duplicates)}  seq gaps: {len(r.seq_gaps)}  "
        f"replay problems: {len(r.problems)}  table mismatches: {len(report.mismatches)}"
    )
    print("RESULT:", "exact" if report.ok else "NOT EXACT")
    for table, text in report.mismatches.items():
        print(f"  {table}: {text}")


if __name__ == "__main__":
    main()
