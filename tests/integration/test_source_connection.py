"""The source's connection faults end to end: a source that is down when a run starts, the
fail-fast `config check --connect`, and resuming after the source primary was switched."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from cdc_platform.cli import main
from cdc_platform.config.models import InstanceConfig
from cdc_platform.runtime import CommitReport, DestinationRuntime, RunSummary
from cdc_platform.testing.destinations import PASSWORD_ENV, instance_config, write_conf
from cdc_platform.testing.mariadb import MariaDBServer
from cdc_platform.testing.replay import replay
from tests.conftest import MariaDBDatabase

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


class Running:
    """A runtime in a background thread, with its commit reports."""

    def __init__(self, runtime: DestinationRuntime) -> None:
        self.runtime = runtime
        self.reports: list[CommitReport] = []
        self.summary: RunSummary | None = None
        runtime._on_commit = self.reports.append
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        self.summary = self.runtime.run()

    def wait_for(self, predicate: Callable[[], bool], timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            if not self.thread.is_alive():
                raise AssertionError(f"runtime ended early: {self.summary}")
            if time.monotonic() > deadline:
                raise AssertionError("condition not met in time")
            time.sleep(0.05)

    def rows(self) -> int:
        return sum(r.rows for r in self.reports)

    def stop(self) -> RunSummary:
        self.runtime.request_stop("test done")
        self.thread.join(timeout=60)
        assert self.summary is not None
        return self.summary


def _shop(server: MariaDBServer) -> str:
    """A fresh server with a shop.t table and the CDC user; returns the user's password."""
    server.start()
    user = server.create_replication_user("cdc", "Pw-not-in-logs-42")
    server.execute("CREATE DATABASE shop", "CREATE TABLE shop.t (id INT PRIMARY KEY)")
    return user.password


def _config(server: MariaDBServer, **store: object) -> InstanceConfig:
    return instance_config(server, "cdc", [r"shop\..*"], server_id=2301, **store)


# -- a source that is down when the run starts --------------------------------------------------


def test_a_run_started_while_the_source_is_down_waits_for_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    server = MariaDBServer(tmp_path / "db")
    password = _shop(server)
    server.stop()
    monkeypatch.setenv(PASSWORD_ENV, password)
    uri = str(tmp_path / "lake" / "d" / "changes")
    address = f"{server.host}:{server.port}"
    try:
        with caplog.at_level(logging.INFO):
            running = Running(DestinationRuntime("d", _config(server), uri))

            def retried() -> bool:
                warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
                return sum(address in m for m in warnings) >= 2

            running.wait_for(retried)
            assert running.runtime.metrics().state == "waiting for the source"
            server.start()  # the database is back (same address)
            running.wait_for(lambda: Path(uri, "_delta_log").exists())
            server.execute("INSERT INTO shop.t VALUES (1), (2)")
            running.wait_for(lambda: running.rows() >= 2)
            summary = running.stop()
    finally:
        server.stop()
    assert summary.error is None
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    print("\n".join(warnings[:2]))
    assert any("not reachable at start (attempt 1)" in m and address in m for m in warnings)
    assert password not in caplog.text
    result = replay(uri)
    assert sorted(row["id"] for row in result.tables["shop.t"].values()) == [1, 2]


def test_config_check_connect_reports_each_destination(
    mariadb: MariaDBDatabase,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv(PASSWORD_ENV, mariadb.user.password)
    conf, lake = tmp_path / "conf", tmp_path / "lake"
    down = MariaDBServer(tmp_path / "never-started")
    for name, server, server_id in (("up", mariadb.server, 2302), ("down", down, 2303)):
        write_conf(
            conf,
            destination=name,
            server=server,
            user=mariadb.user,
            database=mariadb.name,
            lake_root=lake,
            server_id=server_id,
        )
    # Without --connect the configuration alone is checked: both are fine.
    assert main(["config", "check", "--conf", str(conf)]) == 0
    capsys.readouterr()
    assert main(["config", "check", "--conf", str(conf), "--connect"]) == 1
    out = capsys.readouterr().out
    print(out)
    lines = out.splitlines()
    up = lines.index(next(line for line in lines if line.startswith("up: OK")))
    assert lines[up + 1].startswith(
        f"  source {mariadb.server.host}:{mariadb.server.port} (binlog): connected, "
    )
    assert "server_id 1, binlog at mysql-bin." in lines[up + 1]
    dn = lines.index(next(line for line in lines if line.startswith("down: OK")))
    assert lines[dn + 1].startswith(
        f"  source {down.host}:{down.port} (binlog): ERROR cannot reach"
    )
    assert mariadb.user.password not in out
    assert not Path(lake, "down").exists(), "a check must not create anything"
