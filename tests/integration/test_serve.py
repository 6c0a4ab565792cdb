"""`cdc-platform serve` as a subprocess against the private MariaDB: destinations follow the
conf directory (watchdog events, not the periodic scan), kill -9 loses and duplicates nothing,
and two serve processes share destinations by lease."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from cdc_platform.testing.destinations import PASSWORD_ENV, write_conf
from cdc_platform.testing.processes import tail_of, wait_until
from cdc_platform.testing.replay import replay
from cdc_platform.testing.workload import Workload, source_rows
from tests.conftest import MariaDBDatabase

pytestmark = pytest.mark.integration

NO_TIMER = "serve:\n  scan_interval_seconds: 600\n"
"""A scan interval far beyond the test's waits: only file-system events can act in time."""


@dataclass
class Serve:
    """A conf directory and the serve processes running it."""

    conf: Path
    lake: Path
    env: dict[str, str]
    log: Path

    def start(self, *extra: str) -> subprocess.Popen[bytes]:
        with self.log.open("ab") as out:
            return subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "cdc_platform.cli",
                    "serve",
                    "--conf",
                    str(self.conf),
                    "--metrics-interval",
                    "2",
                    *extra,
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self.env,
                start_new_session=True,
            )

    def uri(self, destination: str) -> str:
        return str(self.lake / destination / "changes")

    def holders(self) -> dict[str, str | None]:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "cdc_platform.cli",
                "status",
                "--conf",
                str(self.conf),
                "--json",
            ],
            capture_output=True,
            text=True,
            env=self.env,
            check=False,
            timeout=120,
        )
        rows: list[dict[str, Any]] = json.loads(done.stdout or "[]")
        return {r["destination"]: (r["holder"] or {}).get("address") for r in rows}

    def wait(self, probe: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
        wait_until(probe, timeout=timeout, what=what, log=self.log)


def instance_yaml(mariadb: MariaDBDatabase, tables: str, server_id: int) -> str:
    return (
        "source:\n"
        f"  host: {mariadb.server.host}\n  port: {mariadb.server.port}\n"
        f"  user: {mariadb.user.name}\n  password_env: {PASSWORD_ENV}\n"
        f"  server_id: {server_id}\n  include_tables: ['{tables}']\n"
        "  reconnect_initial_seconds: 0.1\n  reconnect_max_seconds: 1\n"
        "start: {mode: latest}\n"
        "store:\n  batch_timeout_seconds: 0.2\n"
    )


def write_instance(conf: Path, name: str, text: str) -> None:
    """Write as an editor does: a temp file renamed onto instance.yaml."""
    directory = conf / "destinations" / name
    directory.mkdir(parents=True, exist_ok=True)
    temp = directory / ".instance.yaml.tmp"
    temp.write_text(text)
    temp.replace(directory / "instance.yaml")


def tables_in_log(uri: str) -> dict[str, int]:
    try:
        rows = DeltaTable(uri).to_pyarrow_table(columns=["table", "op"]).to_pylist()
    except Exception:  # not created yet
        return {}
    counts: dict[str, int] = {}
    for row in rows:
        if row["op"] != "ddl" and row["table"]:
            counts[row["table"]] = counts.get(row["table"], 0) + 1
    return counts


@pytest.fixture
def serve(mariadb: MariaDBDatabase, tmp_path: Path) -> Serve:
    conf = tmp_path / "conf"
    (conf / "destinations").mkdir(parents=True)
    (conf / "platform.yaml").write_text(f"lake_root: {tmp_path / 'lake'}\n{NO_TIMER}")
    env = {**os.environ, PASSWORD_ENV: mariadb.user.password}
    return Serve(conf, tmp_path / "lake", env, tmp_path / "serve.log")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def test_add_edit_invalid_remove_and_sigterm(mariadb: MariaDBDatabase, serve: Serve) -> None:
    db = mariadb.name
    mariadb.server.execute(
        "CREATE TABLE t1 (id INT PRIMARY KEY, v INT)",
        "CREATE TABLE t2 (id INT PRIMARY KEY, v INT)",
        database=db,
    )
    ids = itertools.count(1)
    proc = serve.start()
    uri = serve.uri("d1")

    def seen_after_insert(table: str) -> Callable[[], bool]:
        def probe() -> bool:
            assert proc.poll() is None, tail_of(serve.log)
            mariadb.server.execute(f"INSERT INTO {table} VALUES ({next(ids)}, 1)", database=db)
            return tables_in_log(uri).get(table, 0) > 0

        return probe

    try:
        # Added while serve runs: captured through a file event (the timer is 600 s).
        write_instance(serve.conf, "d1", instance_yaml(mariadb, f"{db}\\.t1", 2001))
        serve.wait(seen_after_insert("t1"), "the added destination capturing t1")
        assert (serve.holders()["d1"] or "").startswith("serve@")
        assert "t2" not in tables_in_log(uri)

        # Edited: reloaded, the newly included table appears.
        write_instance(serve.conf, "d1", instance_yaml(mariadb, f"{db}\\..*", 2001))
        serve.wait(seen_after_insert("t2"), "the reloaded destination capturing t2")

        # Invalid edit: one error naming file and key; still streaming on the last good config.
        bad = instance_yaml(mariadb, f"{db}\\..*", 2001) + "  batch_sise: 3\n"
        write_instance(serve.conf, "d1", bad)
        serve.wait(
            lambda: "store.batch_sise: unknown key" in serve.log.read_text(),
            "the invalid-config error",
        )
        assert "d1/instance.yaml" in serve.log.read_text()
        before = tables_in_log(uri).get("t2", 0)
        serve.wait(
            lambda: seen_after_insert("t2")() and tables_in_log(uri).get("t2", 0) > before + 2,
            "t2 rows committed while the file is invalid",
        )

        # Removed: stopped, the lease released.
        (serve.conf / "destinations" / "d1" / "instance.yaml").unlink()
        (serve.conf / "destinations" / "d1").rmdir()
        serve.wait(lambda: "d1: stopped (removed or disabled)" in serve.log.read_text(), "stop")
        # A file that changes without an event under conf/ (a symlink to a mounted file, as
        # Kubernetes config maps are): SIGHUP forces the rescan.
        outside = serve.conf.parent / "mounted-d2.yaml"
        outside.write_text(instance_yaml(mariadb, f"{db}\\.t1", 2002))
        (serve.conf / "destinations" / "d2").mkdir()
        (serve.conf / "destinations" / "d2" / "instance.yaml").symlink_to(outside)
        serve.wait(lambda: serve.holders().get("d2") is not None, "d2 held")
        assert "d1" not in serve.holders()
        outside.write_text(instance_yaml(mariadb, f"{db}\\..*", 2002))
        proc.send_signal(signal.SIGHUP)
        serve.wait(lambda: "d2: reloaded" in serve.log.read_text(), "the reload after SIGHUP")

        # SIGTERM: every destination stops after its in-flight commit, exit 0.
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 0, tail_of(serve.log)
        assert "every destination stopped" in serve.log.read_text()
    finally:
        _stop(proc)
    result = replay(uri)
    assert not result.duplicates
    assert not result.seq_gaps
    assert not result.problems


def test_kill_nine_and_restart_lose_and_duplicate_nothing(
    mariadb: MariaDBDatabase, serve: Serve
) -> None:
    db = mariadb.name
    write_conf(
        serve.conf,
        destination="crash",
        server=mariadb.server,
        user=mariadb.user,
        database=db,
        lake_root=serve.lake,
        extra_platform=NO_TIMER,
    )
    uri = serve.uri("crash")
    workload = Workload(mariadb.server, db, seed=5)
    workload.create_schema()
    proc = serve.start()
    try:
        # Until its first commit a new destination has no start position: a kill before it
        # restarts "at the current position". Nudge until the first commit pins the start.
        mariadb.server.execute("CREATE TABLE nudge (id INT PRIMARY KEY)", database=db)
        nudges = itertools.count(1)

        def pinned() -> bool:
            mariadb.server.execute(f"INSERT INTO nudge VALUES ({next(nudges)})", database=db)
            return "nudge" in tables_in_log(uri)

        serve.wait(pinned, "the first commit")
        workload.start()
        for _ in range(3):
            target = workload.stats.committed + 10
            serve.wait(lambda t=target: workload.stats.committed > t, "workload")
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            proc = serve.start()
        workload.stop()

        differences: list[str] = []

        def caught_up() -> bool:
            assert proc.poll() is None, tail_of(serve.log)
            state = replay(uri).tables
            differences[:] = [
                f"{t}: {len(expected)} source rows, {len(actual)} in the log, "
                f"missing {sorted(set(expected) - set(actual))[:3]}, "
                f"extra {sorted(set(actual) - set(expected))[:3]}"
                for t in ("customers", "orders")
                if (actual := state.get(f"{db}.{t}", {}))
                != (expected := source_rows(mariadb.server, db, t))
            ]
            return not differences

        try:
            serve.wait(caught_up, "the change log equal to the source", timeout=180)
        except Exception as exc:
            raise AssertionError(f"{differences}\n{exc}") from None
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 0, tail_of(serve.log)
    finally:
        workload.stop()
        _stop(proc)
    assert workload.stats.committed > 30
    result = replay(uri)
    assert not result.duplicates, result.duplicates[:5]
    assert not result.seq_gaps
    assert not result.problems


def test_two_serve_processes_share_by_lease_and_take_over(
    mariadb: MariaDBDatabase, serve: Serve
) -> None:
    db = mariadb.name
    mariadb.server.execute("CREATE TABLE t1 (id INT PRIMARY KEY, v INT)", database=db)
    names = ("d1", "d2", "d3")
    for index, name in enumerate(names):
        write_instance(serve.conf, name, instance_yaml(mariadb, f"{db}\\.t1", 3001 + index))
    first = serve.start("--address", "serve-a")
    second: subprocess.Popen[bytes] | None = None
    try:
        serve.wait(lambda: serve.holders() == dict.fromkeys(names, "serve-a"), "serve-a holds all")
        second = serve.start("--address", "serve-b")  # a hot standby for every destination
        # A manual switch-over of d1 (`cdc-platform release`): serve-b takes it, so the two
        # processes split the destinations, each streaming on exactly one of them.
        released = subprocess.run(
            [
                sys.executable,
                "-m",
                "cdc_platform.cli",
                "release",
                "--conf",
                str(serve.conf),
                "--destination",
                "d1",
            ],
            env=serve.env,
            check=False,
            capture_output=True,
            timeout=120,
        )
        assert released.returncode == 0, released.stderr
        split = {"d1": "serve-b", "d2": "serve-a", "d3": "serve-a"}
        serve.wait(lambda: serve.holders() == split, "d1 on serve-b, the others on serve-a")
        # kill -9 of serve-a: serve-b takes over its destinations.
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
        serve.wait(lambda: serve.holders() == dict.fromkeys(names, "serve-b"), "serve-b holds all")
        assert second.poll() is None
    finally:
        _stop(first)
        if second is not None:
            _stop(second)
