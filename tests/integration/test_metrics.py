"""The Prometheus endpoint of a real `cdc-platform run` against real MariaDB: the counters
equal the change log, the lag stays true on an idle source while the checkpoint moves on, and
the lease gauges follow the lease when the holder is killed."""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from cdc_platform.testing.ha import Cluster, Node, fast_database_lease
from cdc_platform.testing.processes import let_time_pass
from cdc_platform.testing.replay import has_commits
from tests.conftest import MariaDBDatabase
from tests.integration.test_serve import Serve, instance_yaml, serve, write_instance

__all__ = ["serve"]  # the fixture, shared with test_serve.py

pytestmark = pytest.mark.integration

_SAMPLE = re.compile(r"^([a-z_]+)\{([^}]*)\} (\S+)$")


def scrape(url: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of the endpoint: (name, labels) -> value."""
    with urllib.request.urlopen(url, timeout=5) as response:
        text = response.read().decode()
    samples: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match is None:
            continue
        name, labels, value = match.groups()
        pairs = frozenset(
            tuple(part.split("=", 1)) for part in re.findall(r'[a-z_]+="[^"]*"', labels)
        )
        samples[name, frozenset((k, v.strip('"')) for k, v in pairs)] = float(value)
    return samples


def sample(url: str, name: str, **labels: str) -> float | None:
    return scrape(url).get((name, frozenset({"destination": "ha", **labels}.items())))


def metrics_url(cluster: Cluster, node: Node) -> str:
    found: list[str] = []

    def printed() -> bool:
        match = re.search(r"^metrics: (http://\S+)$", node.text(), re.MULTILINE)
        if match:
            found.append(match.group(1))
        return bool(found)

    cluster.wait(printed, f"{node.address} to print its metrics endpoint", timeout=30)
    return found[0]


@pytest.fixture
def cluster(mariadb: MariaDBDatabase, tmp_path: Path) -> Iterator[Cluster]:
    # A SQLite lease: the source sees no traffic but the test's, so idle means idle.
    made = Cluster(
        tmp_path,
        mariadb.server,
        mariadb.user,
        mariadb.name,
        fast_database_lease(f"sqlite:///{tmp_path}/lease.db"),
    )
    instance = made.conf / "destinations" / made.destination / "instance.yaml"
    with instance.open("a") as out:
        out.write("sink: {idle_checkpoint_seconds: 2}\n")
    yield made
    made.close()


def change_log_ops(uri: str) -> Counter[str]:
    ops = DeltaTable(uri).to_pyarrow_table(columns=["op"]).column("op").to_pylist()
    return Counter(str(op) for op in ops)


def test_counters_equal_the_change_log_and_an_idle_source_keeps_lag_low(
    cluster: Cluster, mariadb: MariaDBDatabase
) -> None:
    server, db = mariadb.server, mariadb.name
    # Rows that exist before the destination starts are copied by its new-table snapshot (op r).
    server.execute(
        "CREATE TABLE old (id INT PRIMARY KEY)",
        "INSERT INTO old VALUES (1), (2), (3), (4), (5), (6), (7)",
        database=db,
    )
    instance = cluster.conf / "destinations" / cluster.destination / "instance.yaml"
    with instance.open("a") as out:
        out.write("snapshot: {new_tables: true}\n")
    server.execute("CREATE TABLE items (id INT PRIMARY KEY, name VARCHAR(20))", database=db)
    node = cluster.start("node-a", "--metrics-port", "0")
    url = metrics_url(cluster, node)
    cluster.wait(lambda: cluster.checkpoint() is not None, "the first commit")
    statements = [f"INSERT INTO items VALUES ({i}, 'n{i}')" for i in range(1, 31)]
    statements += [f"UPDATE items SET name = 'u{i}' WHERE id = {i}" for i in range(1, 11)]
    statements += [
        "DELETE FROM items WHERE id > 25",
        "ALTER TABLE items ADD COLUMN price INT",
        "INSERT INTO items VALUES (99, 'after ddl', 3)",
    ]
    # Transactions on tables not captured (another database) are not counted.
    with server.database(f"{db}_x") as other:
        server.execute("CREATE TABLE t (id INT PRIMARY KEY)", database=other)
        server.execute(*statements[:5], database=db)
        server.execute(*(f"INSERT INTO t VALUES ({i})" for i in range(5)), database=other)
        server.execute(*statements[5:], database=db)
        # r 7, c 31, u 10, d 5, and 2 ddl (the ALTER, and the empty `items` table's definition
        # its snapshot recorded): waiting for one row fewer let the last insert be missed
        cluster.wait(lambda: cluster.rows() >= 7 + 31 + 10 + 5 + 2, "every change committed")

    expected = change_log_ops(cluster.uri)
    assert expected == {"r": 7, "c": 31, "u": 10, "d": 5, "ddl": 2}

    def counters_match() -> bool:
        return all(
            sample(url, "cdc_rows_committed_total", op=op) == expected.get(op, 0)
            for op in ("c", "u", "d", "r", "ddl")
        )

    cluster.wait(counters_match, "the row counters to equal the change log's rows per op")
    # Autocommit: one transaction per statement (the DDL included).
    assert sample(url, "cdc_transactions_committed_total") == len(statements)
    assert (sample(url, "cdc_commit_duration_seconds_count") or 0) >= 1
    last_commit = sample(url, "cdc_last_commit_timestamp_seconds")
    assert last_commit is not None
    assert abs(time.time() - last_commit) < 60
    assert sample(url, "cdc_lease_held") == 1
    assert sample(url, "cdc_snapshot_progress_ratio") == 1
    fill = sample(url, "cdc_buffer_fill_ratio")
    assert fill is not None
    assert 0 <= fill <= 1

    # Idle: a new binlog file and no change for 30 s. The lag stays under two heartbeats
    # plus a batch, and the checkpoint follows the server into the new file.
    before = cluster.checkpoint()
    assert before is not None
    server.execute("FLUSH BINARY LOGS")
    new_file = str(server.query("SHOW MASTER STATUS")[0][0])
    assert new_file != before.resume.file
    lags: list[float] = []
    moved_at: float | None = None
    started = time.monotonic()
    while time.monotonic() - started < 30:
        lag = sample(url, "cdc_source_lag_seconds")
        assert lag is not None
        assert not math.isnan(lag)
        lags.append(lag)
        if moved_at is None:
            checkpoint = cluster.checkpoint()
            if checkpoint is not None and checkpoint.resume.file == new_file:
                moved_at = time.monotonic() - started
        let_time_pass(1.0, because="the idle lag is sampled once a second for 30 s")
    assert max(lags) < 5, f"idle lag samples: {lags}"
    assert moved_at is not None, "the checkpoint stayed in the old binlog file while idle"
    after = cluster.checkpoint()
    assert after is not None
    assert after.resume.file == new_file
    # One heartbeat a second, yet no commit per heartbeat: the move is one empty commit.
    assert after.batch_seq - before.batch_seq <= 2, (before.batch_seq, after.batch_seq)
    assert after.last_seq == before.last_seq
    assert node.stop() == 0


def test_the_lease_gauges_flip_when_the_holder_is_killed(
    cluster: Cluster, mariadb: MariaDBDatabase
) -> None:
    a = cluster.start("node-a", "--metrics-port", "0")
    a_url = metrics_url(cluster, a)
    held = cluster.wait_holder(a)
    b = cluster.start("node-b", "--metrics-port", "0", "--log-format", "json")
    b_url = metrics_url(cluster, b)
    cluster.wait(lambda: sample(a_url, "cdc_lease_held") == 1, "node-a's gauge to show the lease")
    assert sample(a_url, "cdc_lease_epoch") == held.epoch
    assert sample(b_url, "cdc_lease_held") == 0
    lag = sample(b_url, "cdc_source_lag_seconds")
    assert lag is not None
    assert math.isnan(lag), "a standby reports no lag"

    a.signal(signal.SIGKILL)
    a.proc.wait(timeout=30)
    taken = cluster.wait_holder(b, above=held.epoch)
    cluster.wait(lambda: sample(b_url, "cdc_lease_held") == 1, "node-b's gauge to show the lease")
    assert sample(b_url, "cdc_lease_epoch") == taken.epoch
    cluster.wait(
        lambda: (sample(b_url, "cdc_source_lag_seconds") or math.inf) < 5,
        "node-b to report a low lag on the idle source",
        timeout=30,
    )

    # `status` shows the new holder's figures and where its metrics are.
    def status() -> dict[str, Any]:
        out = subprocess.run(
            [sys.executable, "-m", "cdc_platform.cli", "status", "--conf", str(cluster.conf),
             "--json"],
            capture_output=True, text=True, env=cluster.env, timeout=60, check=False,
        )  # fmt: skip
        (entry,) = json.loads(out.stdout)
        return dict(entry)

    def shows_node_b(entry: dict[str, Any]) -> bool:
        # the new holder's first publish may precede its runtime's first lag figure
        return entry["metrics_url"] == b_url and entry["lag_seconds"] is not None

    cluster.wait(lambda: shows_node_b(status()), "status to show node-b's endpoint and lag")
    shown = status()
    assert shown["holder"]["address"] == "node-b"
    assert shown["lag_seconds"] is not None
    assert shown["lag_seconds"] < 5
    assert shown["buffer_fill"] is not None
    assert shown["rows_per_second"] is not None
    assert b.stop() == 0

    # node-b logged JSON: one object per line, each naming the destination; the start of its
    # term carries the position and the epoch; never the password.
    text = b.text()
    assert mariadb.user.password not in text
    records = []
    for line in text.splitlines():
        if line.startswith(("metrics: ", "ha: ")):  # the endpoint and the summary, on stdout
            continue
        record = json.loads(line)
        assert record["destination"] == "ha", line
        assert {"ts", "level", "logger", "event"} <= record.keys(), line
        records.append(record)
    assert any(
        r.get("epoch") == taken.epoch and r.get("position") and "resuming" in r["event"]
        for r in records
    ), "no JSON record of the new term's start with its epoch and position"


def test_serve_exposes_every_destination_on_one_endpoint(
    mariadb: MariaDBDatabase, serve: Serve
) -> None:
    db = mariadb.name
    mariadb.server.execute(
        "CREATE TABLE t1 (id INT PRIMARY KEY)", "CREATE TABLE t2 (id INT PRIMARY KEY)", database=db
    )
    write_instance(serve.conf, "d1", instance_yaml(mariadb, f"{db}\\.t1", 2101))
    write_instance(serve.conf, "d2", instance_yaml(mariadb, f"{db}\\.t2", 2102))
    proc = serve.start("--metrics-port", "0")
    try:
        found: list[str] = []

        def printed() -> bool:
            found.extend(re.findall(r"^metrics: (http://\S+)$", serve.log.read_text(), re.M))
            return bool(found)

        serve.wait(printed, "the metrics endpoint")
        url = found[0]

        def held(name: str) -> Callable[[], bool]:
            return lambda: (
                scrape(url).get(("cdc_lease_held", frozenset({"destination": name}.items()))) == 1
            )

        serve.wait(held("d1"), "d1 held")
        serve.wait(held("d2"), "d2 held")
        # Both have pinned their start position once the change logs exist.
        serve.wait(
            lambda: all(has_commits(serve.uri(d)) for d in ("d1", "d2")),
            "both change logs",
        )
        mariadb.server.execute(
            "INSERT INTO t1 VALUES (1), (2), (3)", "INSERT INTO t2 VALUES (1), (2)", database=db
        )

        def rows(name: str) -> float | None:
            return scrape(url).get(
                ("cdc_rows_committed_total", frozenset({"destination": name, "op": "c"}.items()))
            )

        serve.wait(lambda: rows("d1") == 3 and rows("d2") == 2, "each destination's rows")

        # Removed: its series go with it.
        (serve.conf / "destinations" / "d2" / "instance.yaml").unlink()
        (serve.conf / "destinations" / "d2").rmdir()
        serve.wait(lambda: rows("d2") is None, "d2's series removed")
        assert rows("d1") == 3
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
