"""The local demo: a private MariaDB, a live workload, and the `shop` destination streaming it.

By default the destination runs under Dagster (`dagster dev`: webserver + daemon, whose
sensors launch the run); `--no-dagster` runs the pipeline in this process instead. Everything
lives under `var/demo/` (and `dagster_home/`) next to the conf directory; Ctrl-C stops all of
it.
The conf used is `conf/` with the source pointed at the private server (written to
`var/demo/conf/`), so the shipped example stays the single source of truth.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from cdc_platform.config import load_config
from cdc_platform.infra.signals import SignalRoutes
from cdc_platform.runtime import DestinationRuntime
from cdc_platform.sink.destination_lake import DestinationLake
from cdc_platform.sink.report import CommitReport
from cdc_platform.sink.term import WriteTerm
from cdc_platform.testing.mariadb import MariaDBServer
from cdc_platform.testing.processes import free_port
from cdc_platform.testing.workload import Workload

__all__ = ["demo_conf_dir", "run_demo"]

log = logging.getLogger("cdc_platform.demo")
DEMO_PASSWORD = "demo-cdc-password"  # noqa: S105 (a private, local demo server)


def demo_conf_dir(
    conf: Path, work: Path, server: MariaDBServer, destination: str, spark_mode: str | None
) -> Path:
    """A copy of the conf directory ``conf`` in ``work`` pointed at the demo's ``server`` and
    a lake in ``work`` (and Spark's ``spark_mode`` when given); its path."""
    demo_conf = work / "conf"
    if demo_conf.exists():
        shutil.rmtree(demo_conf)
    shutil.copytree(conf, demo_conf)
    platform_path = demo_conf / "platform.yaml"
    platform: dict[str, Any] = yaml.safe_load(platform_path.read_text()) or {}
    platform["lake_root"] = str(work / "lake")
    if spark_mode is not None:  # e.g. classic: the Spark assets on Apache Spark + delta-spark
        platform["spark"] = {**(platform.get("spark") or {}), "mode": spark_mode}
    platform_path.write_text(yaml.safe_dump(platform, sort_keys=False))
    instance_path = demo_conf / "destinations" / destination / "instance.yaml"
    instance: dict[str, Any] = yaml.safe_load(instance_path.read_text())
    instance["source"]["host"] = server.host
    instance["source"]["port"] = server.port
    instance_path.write_text(yaml.safe_dump(instance, sort_keys=False))
    return demo_conf


def _dagster_dev(
    project: Path, demo_conf: Path, env: dict[str, str], port: int
) -> subprocess.Popen[bytes]:
    """Start `dagster dev` (webserver + daemon) in its own session, so it can be stopped whole."""
    dagster = Path(sys.executable).with_name("dagster")
    home = project / "dagster_home"
    home.mkdir(exist_ok=True)
    return subprocess.Popen(
        [
            str(dagster),
            "dev",
            "-w",
            str(project / "workspace.yaml"),
            "-h",
            "127.0.0.1",
            "-p",
            str(port),
        ],
        cwd=project,
        env={**env, "DAGSTER_HOME": str(home), "CDC_CONF_DIR": str(demo_conf)},
        start_new_session=True,
    )


def _stop_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the whole process group (webserver, daemon, code servers, run workers)."""
    for sig, wait in ((signal.SIGTERM, 30.0), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            proc.poll()  # reap the leader, or the group never looks empty
            if not _group_members(proc.pid):
                return
            time.sleep(0.2)


def _group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes of a process group."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(entry.name))
    return members


_LIVE_RUNS = """{ runsOrError(filter: {statuses: [QUEUED, NOT_STARTED, STARTING, STARTED,
  CANCELING]}) { ... on Runs { results { runId status } } } }"""
_TERMINATE = """mutation($ids: [String!]!) {
  terminateRuns(runIds: $ids, terminatePolicy: SAFE_TERMINATE) { __typename } }"""


def _graphql(url: str, query: str, variables: dict[str, Any] | None = None) -> dict[str, Any]:
    request = urllib.request.Request(  # noqa: S310 (the demo's own local webserver)
        f"{url}/graphql",
        data=json.dumps({"query": query, "variables": variables or {}}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310 (an http(s) URL of the operator's own config)
        data: dict[str, Any] = json.loads(response.read())
    return data


def _cancel_runs(url: str, timeout: float = 60.0) -> None:
    """Ask Dagster to terminate every live run and wait until they ended, so a stop ends them
    cleanly (their in-flight commit finished) rather than killed by the process-group stop."""
    deadline = time.monotonic() + timeout
    asked: set[str] = set()
    while time.monotonic() < deadline:
        try:
            runs = _graphql(url, _LIVE_RUNS)["data"]["runsOrError"]["results"]
            ids = [r["runId"] for r in runs if r["status"] != "CANCELING"]
            if not runs:
                return
            if set(ids) - asked:
                _graphql(url, _TERMINATE, {"ids": ids})
                asked.update(ids)
        except (OSError, KeyError, TypeError, ValueError) as exc:
            log.warning("could not cancel the runs through the webserver: %s", exc)
            return
        time.sleep(0.5)
    log.warning("runs still live %.0f s after cancelling them", timeout)


def _serve_dagster(project: Path, demo_conf: Path, port: int, stop: threading.Event) -> int:
    """Run `dagster dev` until a stop is requested; stop its whole process group after."""
    if port == 0 or not _port_free(port):
        port = free_port()
    dagster = _dagster_dev(project, demo_conf, dict(os.environ), port)
    try:
        print(f"Dagster UI: http://127.0.0.1:{port}  (its sensors start the destination's run)")
        print("press Ctrl-C to stop everything")
        while not stop.wait(1.0):
            if dagster.poll() is not None:
                print(f"dagster dev exited with {dagster.returncode}")
                return 1
        return 0
    finally:
        print("stopping Dagster: cancelling its runs ...")
        _cancel_runs(f"http://127.0.0.1:{port}")
        _stop_group(dagster)


def _print_commit(report: CommitReport) -> None:
    if report.rows:
        print(
            f"batch {report.batch_seq}: {report.rows} rows -> Delta version "
            f"{report.version}, lag {report.lag_seconds:.1f} s, at {report.resume}"
        )


def run_demo(  # noqa: PLR0913 (one keyword-only argument per demo flag)
    conf: Path,
    *,
    destination: str = "shop",
    rate: float = 20.0,
    with_dagster: bool = True,
    port: int = 3000,
    spark_mode: str | None = None,
) -> int:
    """Start MariaDB + workload + the destination (under Dagster by default); block until Ctrl-C.

    ``spark_mode`` overrides ``spark.mode`` of the demo's copy of the configuration."""
    project = conf.resolve().parent
    work = project / "var" / "demo"
    work.mkdir(parents=True, exist_ok=True)
    stop = threading.Event()
    runtimes: list[DestinationRuntime] = []

    def on_signal(signum: signal.Signals) -> None:
        stop.set()
        for runtime in runtimes:
            runtime.request_stop(f"signal {signum.name}")

    with SignalRoutes({signal.SIGINT: on_signal, signal.SIGTERM: on_signal}):
        server = MariaDBServer(work / "mariadb")
        server.start()
        workload = Workload(server, "shop", seed=int(time.time()))
        try:
            user = server.create_replication_user("cdc", DEMO_PASSWORD)
            server.execute("CREATE DATABASE IF NOT EXISTS shop")
            instance = yaml.safe_load(
                (conf / "destinations" / destination / "instance.yaml").read_text()
            )
            os.environ[instance["source"]["password_env"]] = user.password
            demo_conf = demo_conf_dir(conf, work, server, destination, spark_mode)
            config = load_config(demo_conf)
            if destination in config.errors:
                raise config.errors[destination]
            print(f"MariaDB (binlog on) at {server.host}:{server.port}, data in {server.datadir}")
            print(f"change log: {DestinationLake.of(config, destination).change_log}")
            workload.create_schema()
            workload.start(rate_per_second=rate)
            if with_dagster:
                return _serve_dagster(project, demo_conf, port, stop)
            runtimes.append(
                DestinationRuntime(
                    WriteTerm(
                        destination,
                        config.destinations[destination].config,
                        DestinationLake.of(config, destination),
                        on_commit=_print_commit,
                    ),
                    metrics_interval_seconds=30,
                )
            )
            if stop.is_set():
                return 0
            print("streaming; press Ctrl-C to stop")
            summary = runtimes[0].run()
            print(
                f"{destination}: {summary.reason}; {summary.rows} rows in {summary.batches} batches"
            )
            if summary.error is not None:
                print(f"error: {summary.error}")
                return 1
            return 0
        finally:
            workload.stop()
            server.stop()
            print("stopped")


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True
