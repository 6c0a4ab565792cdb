"""The mirror refresh: its decision and the sensor that requests the tables behind."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from dagster import (
    AssetKey,
    AssetMaterialization,
    DagsterInstance,
    DagsterRun,
    DagsterRunStatus,
    SensorResult,
    build_sensor_context,
)

from dagster_defs.mirror_refresh import (
    TRIGGER_TAG,
    MirrorsState,
    build_mirror_refresh,
    decide,
    period,
)
from dagster_defs.resources import PlatformResource
from dagster_defs.table_assets import CHANGE_LOG_VERSION, MIRROR_TAG

pytestmark = pytest.mark.unit


@pytest.fixture
def conf(two_destinations_conf: Path) -> Path:
    return two_destinations_conf


def test_mirror_refresh_decision() -> None:
    """One run per period whether the change log moved or not: new commits alone never
    request a run (on a busy source that was a run every tick)."""

    def state(changes: int | None, *applied: int | None, **kw: Any) -> tuple[bool, str, str]:
        oldest = kw.pop("oldest", 90.0)
        mirrors = MirrorsState(changes, list(applied), oldest, **kw)
        return decide(mirrors, now=100.0, refresh_after=30.0, retry_after=20.0)

    assert state(7, 7, 5) == (False, "", "change log at version 7, mirrors at 5; next run in 20 s")
    assert state(7, 7, 5, oldest=60.0) == (
        True,
        "changes",
        "change log at version 7, mirrors at 5 (oldest materialized 40 s ago)",
    )
    assert state(7, 7, 7) == (False, "", "up to date at change-log version 7; next run in 20 s")
    assert state(7, 7, 7, oldest=60.0) == (
        True,
        "refresh",
        "refresh: oldest mirror materialized 40 s ago",
    )
    assert state(7, 7, None, oldest=None) == (True, "new-table", "1 table(s) never materialized")
    assert state(None, None) == (False, "", "no change-log commit reported yet")
    assert state(7, 5, run_in_progress="abcdef123") == (False, "", "run abcdef12 is applying")
    assert state(7, 5, failed_at=95.0, oldest=0.0) == (
        False,
        "",
        "last mirrors run failed; retrying in 15 s",
    )
    assert state(7, 5, failed_at=70.0, oldest=0.0).due  # waited long enough after the failure


def test_the_refresh_period_keeps_the_freshness_window() -> None:
    """The oldest mirror may age until one more tick and one run still land the next
    materialization inside the window, with a tenth of it to spare."""
    assert period(150.0, 15.0, 20.0) == 85.0  # 300 s lag budget: warn window 150 s
    assert period(150.0, 15.0, 20.0, cap=60.0) == 60.0  # dagster.mirror_refresh_seconds
    assert period(150.0, 15.0, 20.0, cap=600.0) == 85.0  # never past the policy
    assert period(60.0, 15.0, 40.0) == 0.0  # runs back to back when that is all it can do


def test_mirror_refresh_requests_the_tables_behind_the_change_log(
    instance: DagsterInstance, conf: Path
) -> None:
    """Judged by versions: a change-log commit reported while a mirrors run was under way is
    still found (its version is above the one the run applied)."""

    tables = [AssetKey(["cdc", "a", "db", t]) for t in ("t1", "t2")]
    changes = AssetKey(["cdc", "a", "changes"])
    now = [1000.0]
    sensor = build_mirror_refresh(
        {"a": tables}, {"a": 70.0}, minimum_interval_seconds=1, clock=lambda: now[0]
    )  # period: 70 - 1 - 30 (a run, until one succeeded) - 14 = 25 s

    def tick() -> list[Any]:
        context = build_sensor_context(
            instance=instance, resources={"platform": PlatformResource(conf_dir=str(conf))}
        )
        result = sensor(context)
        return list(result.run_requests or []) if isinstance(result, SensorResult) else []

    def commit(version: int) -> None:
        instance.report_runless_asset_event(
            AssetMaterialization(changes, metadata={"delta_version": version})
        )

    def mirrored(version: int) -> None:
        for key in tables:
            instance.report_runless_asset_event(
                AssetMaterialization(key, metadata={CHANGE_LOG_VERSION: version})
            )
        now[0] = time.time()  # the materializations' own time

    assert tick() == []  # no change log yet
    commit(3)
    (request,) = tick()  # never mirrored
    assert request.asset_selection == tables
    assert request.tags == {MIRROR_TAG: "a", TRIGGER_TAG: "new-table"}  # short tags
    assert request.asset_check_keys == []  # the reconciliation checks run on their own schedule
    mirrored(3)
    assert tick() == []
    commit(4)  # e.g. while a run that had read version 3 was still writing
    assert tick() == []  # new commits wait for the period: no run per commit
    now[0] += 24.0
    assert tick() == []
    now[0] += 1.0
    (request,) = tick()
    assert request.asset_selection == tables
    assert request.tags[TRIGGER_TAG] == "changes"
    instance.add_run(
        DagsterRun(
            job_name="cdc_mirrors",
            run_id=str(uuid.uuid4()),
            status=DagsterRunStatus.STARTED,
            tags={MIRROR_TAG: "a"},
        )
    )
    assert tick() == []  # a mirrors run of the destination is under way
