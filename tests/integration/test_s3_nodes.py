"""One destination's nodes on "separate machines": each `cdc-platform run` has its own working
directory and its own copy of the conf, and the nodes share only the object store (SeaweedFS),
the source (MariaDB) and ZooKeeper.

The active node is killed -9 under load, then its successor too; the last node drains. The
change log replays to exactly the source. A fourth machine then builds the mirrors through
Dagster (the `dagster` CLI over the project's definitions) and reconciles them with the
source (`cdc-platform reconcile`). No node wrote a file into its own directory.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from cdc_platform.ha.members import HolderInfo
from cdc_platform.testing.ha import Cluster, Node, commit_history, fast_zookeeper_lease
from cdc_platform.testing.workload import Workload
from tests.conftest import MariaDBDatabase, S3Lake
from tests.integration.test_ha_failover import finish

pytestmark = pytest.mark.integration

RATE = 40.0
"""Workload transactions per second: continuous, but leaves the 2 cores some air."""


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def _standing_by(node: Node) -> bool:
    return "standby" in node.text()


def start_node(cluster: Cluster, homes: Path, logs: Path, address: str) -> tuple[Node, Path]:
    """`cdc-platform run` with its own working directory holding only its own conf copy; its
    output goes to a log outside that directory (as a container's stdout would)."""
    home = homes / address
    home.mkdir(parents=True)
    shutil.copytree(cluster.conf, home / "conf")
    log = logs / f"{address}.log"
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "cdc_platform.cli",
                "run",
                "--conf",
                "conf",
                "--destination",
                cluster.destination,
                "--address",
                address,
                "--metrics-interval",
                "2",
            ],
            cwd=home,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=cluster.env,
            start_new_session=True,
        )
    node = Node(address, proc, log)
    cluster.nodes.append(node)
    return node, home


def mirror_and_reconcile(
    cluster: Cluster, homes: Path, address: str
) -> tuple[Path, dict[str, Any]]:
    """On a machine of its own (a new working directory with a conf copy): the mirror assets
    materialized by the `dagster` CLI, then `cdc-platform reconcile --json`; its report."""
    home = homes / address
    home.mkdir(parents=True)
    shutil.copytree(cluster.conf, home / "conf")
    env = {**cluster.env, "CDC_CONF_DIR": "conf"}
    materialize = subprocess.run(
        [
            sys.executable,
            "-m",
            "dagster",
            "asset",
            "materialize",
            "-m",
            "dagster_defs.definitions",
            "--select",
            # every table's mirror (not their daily history, a partitioned asset)
            f'key:"cdc/{cluster.destination}/*/*" and not key:"*_daily_history"',
        ],
        cwd=home,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert materialize.returncode == 0, (materialize.stdout + materialize.stderr)[-4000:]
    reconcile = subprocess.run(
        [
            sys.executable,
            "-m",
            "cdc_platform.cli",
            "reconcile",
            "--conf",
            "conf",
            "--destination",
            cluster.destination,
            "--json",
        ],
        cwd=home,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert reconcile.returncode == 0, (reconcile.stdout + reconcile.stderr)[-4000:]
    report: dict[str, Any] = json.loads(reconcile.stdout)
    return home, report


def wait_new_holder(cluster: Cluster, dead: Node, above: int) -> tuple[Node, HolderInfo]:
    """Wait until a node other than ``dead`` holds the lease above epoch ``above``."""
    found: list[HolderInfo] = []

    def taken() -> bool:
        holder = cluster.holder()
        if holder is not None and holder.address != dead.address and holder.epoch > above:
            found.append(holder)
            return True
        return False

    cluster.wait(taken, f"a node other than {dead.address} to hold the lease above {above}")
    node = next(n for n in cluster.nodes if n.address == found[-1].address)
    return node, found[-1]


def test_three_nodes_sharing_only_s3_source_and_zookeeper_survive_two_kill_nines(
    mariadb: MariaDBDatabase, s3_lake: S3Lake, zk_hosts: str, tmp_path: Path
) -> None:
    cluster = Cluster(
        tmp_path / "shared",
        mariadb.server,
        mariadb.user,
        mariadb.name,
        fast_zookeeper_lease(zk_hosts),
        destination="multi",
        lake_root=s3_lake.uri,
    )
    homes, logs = tmp_path / "nodes", tmp_path / "logs"
    logs.mkdir()
    try:
        workload = Workload(mariadb.server, mariadb.name, seed=31)
        workload.create_schema()
        a, home_a = start_node(cluster, homes, logs, "node-a")
        held = cluster.wait_holder(a)
        cluster.wait(lambda: cluster.checkpoint() is not None, "node-a's first commit")
        others = [start_node(cluster, homes, logs, name) for name in ("node-b", "node-c")]
        for node, _ in others:
            cluster.wait(partial(_standing_by, node), f"{node.address} to stand by")
        workload.start(rate_per_second=RATE)
        cluster.wait_rows_beyond(cluster.rows())

        a.kill()  # the active node, under load
        second, taken = wait_new_holder(cluster, a, held.epoch)
        cluster.wait_claimed(taken.epoch)
        cluster.wait_rows_beyond(cluster.rows())

        second.kill()  # and its successor
        third, last = wait_new_holder(cluster, second, taken.epoch)
        cluster.wait_claimed(last.epoch)
        cluster.wait_rows_beyond(cluster.rows())

        finish(cluster, workload, third)
        epochs = {c.epoch for c in commit_history(cluster.uri)}
        assert epochs >= {held.epoch, taken.epoch, last.epoch}, epochs
        home_d, report = mirror_and_reconcile(cluster, homes, "node-d")
        assert report["status"] == "clean", report
        assert report["differences"] == 0, report
        assert report["source_rows"] > 0, report
        assert {t["table"].split(".")[-1] for t in report["tables"]} >= {"customers", "orders"}
        objects = s3_lake.keys()
        assert any("/multi/changes/_delta_log/" in key for key in objects)
        assert any("/multi/mirror/" in key for key in objects)
        conf_files = _files(cluster.conf)
        for home in (home_a, home_d, *(h for _, h in others)):
            written = [f for f in _files(home) if f.removeprefix("conf/") not in conf_files]
            assert written == [], f"{home.name} wrote into its own directory: {written}"
            assert sorted(p.name for p in home.iterdir()) == ["conf"]
    finally:
        cluster.close()
