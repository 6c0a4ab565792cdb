"""End to end with a real Dagster daemon: the mirrors follow a live workload, fresh, and go
stale on their own once their sensor is stopped."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from dagster import (
    AssetCheckKey,
    AssetKey,
    DagsterInstance,
    RunsFilter,
)
from dagster._core.definitions.freshness import FreshnessState

from cdc_platform.testing.workload import Workload
from tests.conftest import MariaDBDatabase
from tests.integration.dagster_daemon import (
    Daemon,
    keep_sensor_stopped,
    stage_destination,
    started_run,
    wait_for,
)

pytestmark = pytest.mark.integration


def mirror_materializations(instance: DagsterInstance, key: AssetKey) -> int:
    return len(instance.fetch_materializations(records_filter=key, limit=1000).records)


def freshness(instance: DagsterInstance, keys: list[AssetKey]) -> set[FreshnessState]:
    records = instance.get_freshness_state_records(keys)
    return {records[k].freshness_state if k in records else FreshnessState.UNKNOWN for k in keys}


@pytest.mark.timeout(1200)  # two mirrors runs (a run worker each) and the 60 s freshness window
def test_mirrors_follow_a_live_workload_and_go_stale_without_their_sensor(
    dagster_daemon: Daemon, mariadb: MariaDBDatabase, tmp_path: Path
) -> None:
    """Under a live workload every mirror is materialized again and again by mirror_refresh
    (the one mechanism) and its freshness policy (the lag budget, 60 s) stays PASS; the change
    log's lag check is evaluated by the running monitor without any run. With the sensor
    stopped, as a user does in the UI, the mirrors turn FAIL on their own."""
    conf = dagster_daemon.conf
    name = "live"
    workload = Workload(mariadb.server, mariadb.name, seed=27)
    workload.create_schema()
    staged = stage_destination(conf, name, mariadb, tmp_path / "lake")
    instance_yaml = staged / "instance.yaml"
    instance_yaml.write_text(instance_yaml.read_text() + "lag_budget_seconds: 60\n")
    shutil.copytree(staged, conf / "destinations" / name)
    dagster_daemon.env["FRESHNESS_DAEMON_INTERVAL_SECONDS"] = "3"
    instance = dagster_daemon.start()
    mirrors = [AssetKey(["cdc", name, mariadb.name, t]) for t in ("customers", "orders")]
    workload.start(rate_per_second=5)
    try:
        wait_for("run STARTED", lambda: started_run(instance, name, set()), timeout=300)
        wait_for(
            "every mirror materialized again (a second mirrors run)",
            lambda: all(mirror_materializations(instance, k) >= 2 for k in mirrors),
            timeout=600,
        )
        wait_for("mirrors fresh", lambda: freshness(instance, mirrors) == {FreshnessState.PASS})
        runs = instance.get_runs(filters=RunsFilter(job_name="cdc_mirrors"))
        assert runs
        assert all(r.tags.get("cdc/mirrors") == name for r in runs)
        lag = AssetCheckKey(AssetKey(["cdc", name, "changes"]), "lag_within_budget")
        records = instance.event_log_storage.get_asset_check_execution_history(lag, limit=10)
        assert records, "the live run evaluates the lag check with its materializations"
    finally:
        workload.stop()

    def stale() -> bool:
        keep_sensor_stopped(instance, "mirror_refresh")
        return freshness(instance, mirrors) == {FreshnessState.FAIL}

    # a mirrors run may still be going when the sensor stops: its end plus the 60 s window
    wait_for("the mirrors FAIL their freshness on their own", stale, timeout=300)
