"""End to end with a real Dagster daemon: the asset checks count (issue 44.1).

Dagster shows a check's status only when its newest evaluation targets the asset's newest
materialization (GraphQL's ``executionForLatestMaterialization``, what the UI reads; else
"Not evaluated"). The change log is materialized with every commit and the mirrors every few
seconds, while the lag check came from a sensor once a minute and the reconciliation every
15-30 min: both read "Not evaluated" nearly all the time. Here the long-lived run evaluates
the lag check with its materializations, and each mirror materialization carries the newest
reconciliation verdict: green after a passing reconciliation, red (WARN) after one that had
to repair, each on a mirror materialized after the reconciliation ran.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dagster import AssetCheckKey, AssetKey, DagsterInstance
from dagster._core.definitions.run_request import InstigatorType
from dagster._core.scheduler.instigation import InstigatorStatus
from dagster._core.workspace.context import WorkspaceProcessContext
from dagster._core.workspace.load_target import WorkspaceFileTarget
from dagster_graphql.test.utils import execute_dagster_graphql

from cdc_platform.testing.destinations import PASSWORD_ENV
from cdc_platform.testing.replay import has_commits
from cdc_platform.testing.workload import Workload
from dagster_defs.check_carry import CARRIED_FROM_RUN
from tests.conftest import MariaDBDatabase
from tests.integration.dagster_daemon import (
    PROJECT,
    Daemon,
    keep_sensor_stopped,
    stage_destination,
    started_run,
    wait_for,
)
from tests.integration.test_dagster_e2e_reconcile import check_evaluations

pytestmark = pytest.mark.integration

RECONCILE_SENSORS = ("reconcile_sensor", "reconcile_schedule")  # its name before 44.7
CHECKS_QUERY = """query ($path: [String!]!) {
  assetNodes(assetKeys: [{path: $path}]) {
    assetChecksOrError { ... on AssetChecks { checks {
      name
      executionForLatestMaterialization { status runId evaluation { severity success } }
    } } }
  }
}"""


@pytest.fixture
def graphql(
    dagster_daemon: Daemon, monkeypatch: pytest.MonkeyPatch
) -> Iterator[WorkspaceProcessContext]:
    """The webserver's GraphQL over the daemon's instance and the project's workspace (its
    code server sees the daemon's conf directory)."""
    for key in ("DAGSTER_HOME", "CDC_CONF_DIR", PASSWORD_ENV):
        if key in dagster_daemon.env:
            monkeypatch.setenv(key, dagster_daemon.env[key])
    monkeypatch.chdir(PROJECT)
    target = WorkspaceFileTarget([str(PROJECT / "workspace.yaml")])
    with WorkspaceProcessContext(dagster_daemon.instance, target) as context:
        yield context


def latest_check(
    context: WorkspaceProcessContext, key: AssetKey, check: str
) -> dict[str, Any] | None:
    """``executionForLatestMaterialization`` of ``check`` on ``key``, as the UI reads it."""
    result = execute_dagster_graphql(
        context.create_request_context(), CHECKS_QUERY, variables={"path": key.path}
    )
    assert not result.errors, result.errors
    (node,) = result.data["assetNodes"]
    found = [c for c in node["assetChecksOrError"]["checks"] if c["name"] == check]
    assert found, f"no check {check} on {key.to_user_string()}"
    execution: dict[str, Any] | None = found[0]["executionForLatestMaterialization"]
    return execution


def set_reconciling(instance: DagsterInstance, *, running: bool) -> None:
    want = InstigatorStatus.RUNNING if running else InstigatorStatus.STOPPED
    for state in instance.all_instigator_state(instigator_type=InstigatorType.SENSOR):
        if state.name in RECONCILE_SENSORS and state.status != want:
            instance.update_instigator_state(state.with_status(want))


def verdict_time(instance: DagsterInstance, key: AssetCheckKey, *, passed: bool) -> float | None:
    """When the newest reconciliation (not a carried copy) with that outcome was recorded."""
    records = instance.event_log_storage.get_asset_check_execution_history(key, limit=50)
    for record in records:
        event = record.event
        data = event.dagster_event.event_specific_data if event and event.dagster_event else None
        metadata = getattr(data, "metadata", {})
        carried = CARRIED_FROM_RUN in metadata
        if event is not None and getattr(data, "passed", None) is passed and not carried:
            return float(event.timestamp)
    return None


def materialized_after(instance: DagsterInstance, key: AssetKey, when: float) -> bool:
    records = instance.fetch_materializations(records_filter=key, limit=1).records
    return bool(records) and records[0].timestamp > when


def test_checks_are_evaluated_for_the_latest_materialization(
    dagster_daemon: Daemon,
    graphql: WorkspaceProcessContext,
    mariadb: MariaDBDatabase,
    tmp_path: Path,
) -> None:
    conf = dagster_daemon.conf
    name = "chk"
    platform = conf / "platform.yaml"
    platform.write_text(
        platform.read_text() + "reconcile: {interval_minutes: [0.2, 0.3], chunk_size: 200}\n"
    )
    workload = Workload(mariadb.server, mariadb.name, seed=11)
    workload.create_schema()
    workload.run_transactions(20)
    staged = stage_destination(conf, name, mariadb, tmp_path / "lake")
    shutil.copytree(staged, conf / "destinations" / name)
    instance = dagster_daemon.start()
    graphql.reload_workspace()  # the code location now has the destination's assets
    changes = AssetKey(["cdc", name, "changes"])
    customers = AssetKey(["cdc", name, mariadb.name, "customers"])
    reconciled = AssetCheckKey(customers, "reconciled")

    def without_the_monitor() -> bool:
        # The lag check must come from the run itself: no sensor evaluates it meanwhile.
        keep_sensor_stopped(instance, "running_monitor")
        return started_run(instance, name, set()) is not None

    wait_for("run STARTED", without_the_monitor, timeout=300)
    wait_for("change log created", lambda: has_commits(str(tmp_path / "lake" / name / "changes")))
    workload.start(rate_per_second=5)
    try:
        # The lag check counts for the change log's newest materialization, while commits
        # keep materializing it.
        wait_for(
            "the change log materialized by the run",
            lambda: instance.fetch_materializations(records_filter=changes, limit=1).records,
        )
        lag = wait_for(
            "lag check evaluated for the latest change-log materialization",
            lambda: latest_check(graphql, changes, "lag_within_budget"),
            timeout=120,
        )
        assert isinstance(lag, dict)
        assert lag["status"] == "SUCCEEDED", lag

        # A passing reconciliation is carried by the mirror materialized after it: green.
        passed_at = wait_for(
            "a passing reconciliation of customers",
            lambda: verdict_time(instance, reconciled, passed=True),
            timeout=240,
        )
        assert isinstance(passed_at, float)
        set_reconciling(instance, running=False)
        wait_for(
            "customers materialized after the reconciliation",
            lambda: materialized_after(instance, customers, passed_at),
            timeout=120,
        )
        # the run writes the carried verdict just after the materialization: wait for it
        green = wait_for(
            "reconciled evaluated on the newest mirror",
            lambda: latest_check(graphql, customers, "reconciled"),
            timeout=60,
        )
        assert isinstance(green, dict), "reconciled reads 'Not evaluated' on the newest mirror"
        assert green["status"] == "SUCCEEDED"

        # A row changed behind the binlog's back: the next reconciliation repairs it and
        # fails (WARN); the mirrors materialized after it carry that: red.
        quiet_id = int(mariadb.server.query("SELECT MIN(id) FROM customers", mariadb.name)[0][0])
        mariadb.server.execute(
            "SET sql_log_bin = 0",
            f"UPDATE customers SET name = 'changed quietly' WHERE id = {quiet_id}",
            database=mariadb.name,
        )
        set_reconciling(instance, running=True)
        failed_at = wait_for(
            "a reconciliation of customers that repaired the quiet change",
            lambda: (t := verdict_time(instance, reconciled, passed=False)) and t > passed_at and t,
            timeout=240,
        )
        assert isinstance(failed_at, float)
        set_reconciling(instance, running=False)
        wait_for(
            "customers materialized after the repairing reconciliation",
            lambda: materialized_after(instance, customers, failed_at),
            timeout=120,
        )
        red = wait_for(
            "reconciled evaluated on the newest mirror",
            lambda: latest_check(graphql, customers, "reconciled"),
            timeout=60,
        )
        assert isinstance(red, dict)
        assert red["status"] == "FAILED"
        assert red["evaluation"]["severity"] == "WARN"
        assert len(check_evaluations(instance, name, mariadb.name, "customers")) >= 2
    finally:
        workload.stop()
        set_reconciling(instance, running=False)
    shutil.rmtree(conf / "destinations" / name)
