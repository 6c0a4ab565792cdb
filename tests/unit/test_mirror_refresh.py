"""The mirror refresh: its decision and the sensor that requests the tables behind."""

from __future__ import annotations

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

from dagster_defs.mirror_refresh import MirrorsState, build_mirror_refresh, decide
from dagster_defs.resources import PlatformResource
from dagster_defs.table_assets import CHANGE_LOG_VERSION, MIRROR_TAG

pytestmark = pytest.mark.unit


@pytest.fixture
def conf(two_destinations_conf: Path) -> Path:
    return two_destinations_conf


def test_mirror_refresh_decision() -> None:
    def state(changes: int | None, *applied: int | None, **kw: Any) -> tuple[bool, str]:
        oldest = kw.pop("oldest", 90.0)
        mirrors = MirrorsState(changes, list(applied), oldest, **kw)
        return decide(mirrors, now=100.0, refresh_after=30.0, retry_after=20.0)

    assert state(7, 7, 5) == (True, "change log at version 7, mirrors at 5")
    assert state(7, 7, 7) == (False, "up to date at change-log version 7; refresh in 20 s")
    assert state(7, 7, 7, oldest=60.0) == (True, "refresh: oldest mirror materialized 40 s ago")
    assert state(7, 7, None, oldest=None) == (True, "1 table(s) never materialized")
    assert state(None, None) == (False, "no change-log commit reported yet")
    assert state(7, 5, run_in_progress="abcdef123") == (False, "run abcdef12 is applying")
    assert state(7, 5, failed_at=95.0) == (False, "last mirrors run failed; retrying in 15 s")
    assert state(7, 5, failed_at=70.0)[0]  # waited long enough after the failure


def test_mirror_refresh_requests_the_tables_behind_the_change_log(
    instance: DagsterInstance, conf: Path
) -> None:
    """Judged by versions: a change-log commit reported while a mirrors run was under way is
    still found (its version is above the one the run applied)."""

    tables = [AssetKey(["cdc", "a", "db", t]) for t in ("t1", "t2")]
    changes = AssetKey(["cdc", "a", "changes"])
    sensor = build_mirror_refresh({"a": tables}, {"a": 3600.0}, minimum_interval_seconds=1)

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

    assert tick() == []  # no change log yet
    commit(3)
    (request,) = tick()  # never mirrored
    assert request.asset_selection == tables
    assert request.tags[MIRROR_TAG] == "a"
    assert request.asset_check_keys == []  # the reconciliation checks run on their own schedule
    mirrored(3)
    assert tick() == []
    commit(4)  # e.g. while a run that had read version 3 was still writing
    assert [r.asset_selection for r in tick()] == [tables]
    instance.add_run(
        DagsterRun(
            job_name="cdc_mirrors",
            run_id=str(uuid.uuid4()),
            status=DagsterRunStatus.STARTED,
            tags={MIRROR_TAG: "a"},
        )
    )
    assert tick() == []  # a mirrors run of the destination is under way
