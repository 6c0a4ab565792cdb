"""End to end with a real Dagster daemon: the scheduled reconciliation finds rows changed
behind the binlog's back, and the streaming run repairs them."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from dagster import (
    AssetCheckEvaluation,
    AssetCheckKey,
    AssetCheckSeverity,
    AssetKey,
    DagsterInstance,
)

from cdc_platform.testing.replay import has_commits, replay
from cdc_platform.testing.workload import Workload, source_rows
from dagster_defs.reconcile import CHECK_NAME
from tests.conftest import MariaDBDatabase
from tests.integration.dagster_daemon import (
    Daemon,
    stage_destination,
    started_run,
    wait_for,
)

pytestmark = pytest.mark.integration


def check_evaluations(
    instance: DagsterInstance, name: str, db: str, table: str
) -> list[AssetCheckEvaluation]:
    key = AssetCheckKey(AssetKey(["cdc", name, db, table]), CHECK_NAME)
    records = instance.event_log_storage.get_asset_check_execution_history(key, limit=100)
    out = []
    for record in records:
        event = record.event
        if event is not None and event.dagster_event is not None:
            data = event.dagster_event.event_specific_data
            if isinstance(data, AssetCheckEvaluation):
                out.append(data)
    return out


def test_scheduled_reconciliation_under_a_real_daemon(
    dagster_daemon: Daemon, mariadb: MariaDBDatabase, tmp_path: Path
) -> None:
    """The reconcile sensor launches the per-table checks where the lease is held: rows from
    before the destination's start and a row changed behind the binlog's back are found, and
    repaired by the streaming run; the table mirrors pick the repairs up by themselves.

    The destination exists before the daemon starts, so its tables (read from the source's
    information_schema) have their assets and checks from the code location's first load."""
    conf = dagster_daemon.conf
    name = "rec"
    platform = conf / "platform.yaml"
    # every 12-18 s (the sensor ticks every 12 s): shorter launches reconciliation runs back
    # to back, each a run worker process of its own, and slows everything else down
    platform.write_text(
        platform.read_text() + "reconcile: {interval_minutes: [0.2, 0.3], chunk_size: 200}\n"
    )
    workload = Workload(mariadb.server, mariadb.name, seed=9)
    workload.create_schema()
    workload.run_transactions(100)  # before the start: only the reconciliation copies these
    staged = stage_destination(conf, name, mariadb, tmp_path / "lake")
    (conf / "destinations").mkdir(exist_ok=True)
    shutil.copytree(staged, conf / "destinations" / name)
    instance = dagster_daemon.start()
    wait_for("run STARTED", lambda: started_run(instance, name, set()))
    uri = str(tmp_path / "lake" / name / "changes")
    wait_for("change log created", lambda: has_commits(uri))
    workload.run_transactions(100)  # changes after the start: the mirrors get them
    db = mariadb.name
    for table in ("customers", "orders"):
        mirror = AssetKey(["cdc", name, db, table])
        wait_for(
            f"mirror of {table} materialized",
            lambda key=mirror: instance.fetch_materializations(records_filter=key, limit=1).records,
            timeout=180,
        )
    wait_for(
        "a reconciliation that compared the customers mirror and passed",
        lambda: any(
            e.passed and int(e.metadata["source_rows"].value) > 0
            for e in check_evaluations(instance, name, db, "customers")
        ),
        timeout=180,
    )
    seen = len(check_evaluations(instance, name, db, "customers"))
    quiet_id = int(mariadb.server.query("SELECT MIN(id) FROM customers", mariadb.name)[0][0])
    mariadb.server.execute(
        "SET sql_log_bin = 0",
        f"UPDATE customers SET name = 'changed quietly' WHERE id = {quiet_id}",
        database=mariadb.name,
    )
    failed = wait_for(
        "a reconciliation that found and repaired the quiet change",
        lambda: [
            e
            for e in check_evaluations(instance, name, db, "customers")[: -seen or None]
            if not e.passed and int(e.metadata["changed"].value) >= 1
        ],
        timeout=240,
    )
    assert isinstance(failed, list)
    assert failed[0].severity == AssetCheckSeverity.WARN
    assert failed[0].metadata["repaired_by"].value.endswith("(lease holder)")
    key = (("id", quiet_id),)
    expected = source_rows(mariadb.server, mariadb.name, "customers")[key]
    assert expected["name"] == "changed quietly"

    def repaired_row() -> bool:
        return replay(uri).tables.get(f"{mariadb.name}.customers", {}).get(key) == expected

    wait_for("the repair in the change log", repaired_row)
    result = replay(uri)
    for table in ("customers", "orders"):  # rows from before the start were filled in too
        assert result.tables[f"{mariadb.name}.{table}"] == source_rows(
            mariadb.server, mariadb.name, table
        ), table
    shutil.rmtree(conf / "destinations" / name)
