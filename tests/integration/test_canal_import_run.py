"""A Canal conf directory imported with `cdc-platform import-canal` runs as it is: its
ZooKeeper lease, filters and start, against a real MariaDB and ZooKeeper."""

from __future__ import annotations

import re
import shutil
import threading
from pathlib import Path

import pytest

from cdc_platform.cli import main
from cdc_platform.config import load_config
from cdc_platform.runtime.supervised import supervised_destination
from cdc_platform.sink.destination_lake import DestinationLake
from cdc_platform.testing.processes import wait_for
from cdc_platform.testing.replay import has_commits, replay
from tests.conftest import MariaDBDatabase

pytestmark = pytest.mark.integration

FIXTURE = Path(__file__).parent.parent / "fixtures" / "canal"


def test_imported_canal_destination_runs(
    mariadb: MariaDBDatabase, zk_hosts: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = mariadb.name
    canal = tmp_path / "canal"
    shutil.copytree(FIXTURE, canal)
    server = canal / "canal.properties"
    server.write_text(
        re.sub(r"(?m)^canal\.zkServers = .*$", f"canal.zkServers = {zk_hosts}", server.read_text())
    )
    instance = canal / "example" / "instance.properties"
    text = instance.read_text()
    for key, value in {
        "canal.instance.master.address": f"{mariadb.server.host}:{mariadb.server.port}",
        "canal.instance.dbUsername": mariadb.user.name,
        "canal.instance.dbPassword": "not-imported",
        "canal.instance.filter.regex": f"{db}\\\\\\\\..*",
    }.items():
        line = f"{key}={value}"
        text = re.sub(rf"(?m)^{re.escape(key)}\s*=.*$", lambda _m, line=line: line, text)
    instance.write_text(text + "canal.instance.mysql.slaveId=2601\n")
    mariadb.server.execute(
        "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(8))",
        "INSERT INTO t VALUES (1, 'before')",
        database=db,
    )
    conf = tmp_path / "conf"
    assert main(["import-canal", str(canal), "--out", str(conf)]) == 0
    monkeypatch.setenv("CDC_EXAMPLE_PASSWORD", mariadb.user.password)
    assert main(["config", "check", "--conf", str(conf)]) == 0
    loaded = load_config(conf)
    assert loaded.platform.lease.backend == "zookeeper"

    with supervised_destination(loaded, loaded.destinations["example"]) as supervisor:
        runner = threading.Thread(
            target=lambda: supervisor.run(exit_when_idle_seconds=1.5), daemon=True
        )
        runner.start()
        uri = DestinationLake.of(loaded, "example").change_log
        wait_for(lambda: has_commits(uri), "the run's first commit")
        mariadb.server.execute("INSERT INTO t VALUES (2, 'after')", database=db)
        runner.join(timeout=60)
        assert not runner.is_alive()
    rows = replay(uri).tables[f"{db}.t"]
    # Canal's default start (the current end): the row from before is not in the log
    assert sorted(row["v"] for row in rows.values()) == ["after"]
