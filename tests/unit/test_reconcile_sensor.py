"""The reconciliation sensor: runs where the lease is held, after a random wait."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from dagster import (
    DagsterInstance,
    DagsterRun,
    DagsterRunStatus,
    SensorResult,
    SkipReason,
    build_sensor_context,
)

from cdc_platform.coordination.table_catalog import Catalog, CatalogTable
from dagster_defs.cdc_job import CDC_JOB, DESTINATION_TAG
from dagster_defs.reconcile import (
    RECONCILE_JOB,
    RECONCILE_TAG,
    build_reconcile_sensor,
    check_keys,
)
from dagster_defs.resources import PlatformResource

pytestmark = pytest.mark.unit


@pytest.fixture
def conf(two_destinations_conf: Path) -> Path:
    return two_destinations_conf


def add_run(instance: DagsterInstance, job: str, tags: dict[str, str]) -> None:
    instance.add_run(
        DagsterRun(
            job_name=job, run_id=str(uuid.uuid4()), status=DagsterRunStatus.STARTED, tags=tags
        )
    )


def test_sensor_requests_only_where_the_lease_is_held_after_a_random_wait(
    instance: DagsterInstance, conf: Path
) -> None:
    now = [10_000.0]
    tables = {
        name: Catalog(name, (CatalogTable("db", "t1"), CatalogTable("db", "t2")))
        for name in ("a", "b")
    }
    checks = {name: check_keys(name, catalog) for name, catalog in tables.items()}
    sensor = build_reconcile_sensor(clock=lambda: now[0], rand=lambda: 0.5, checks=checks)

    def tick(cursor: str | None) -> SensorResult:
        context = build_sensor_context(
            instance=instance,
            cursor=cursor,
            resources={"platform": PlatformResource(conf_dir=str(conf))},
        )
        result = sensor(context)
        assert isinstance(result, SensorResult)
        return result

    first = tick(None)
    assert not first.run_requests
    assert json.loads(first.cursor or "{}") == {"a": 10_000 + 22.5 * 60, "b": 10_000 + 22.5 * 60}

    add_run(instance, CDC_JOB, {DESTINATION_TAG: "a"})  # a streams, b does not
    now[0] += 22.5 * 60
    second = tick(first.cursor)
    assert second.run_requests is not None
    assert [r.tags[RECONCILE_TAG] for r in second.run_requests] == ["a"]
    # one run per destination, every table's check in it (cdc/a/db/t1, cdc/a/db/t2)
    assert second.run_requests[0].asset_check_keys == checks["a"]
    assert [k.asset_key.path for k in checks["a"]] == [["cdc", "a", "db", t] for t in ("t1", "t2")]
    due = json.loads(second.cursor or "{}")
    assert due["a"] == due["b"] == now[0] + 22.5 * 60  # b skipped and rescheduled too

    # a reconciliation of `a` still running when `a` is due again: not launched twice
    add_run(instance, RECONCILE_JOB, {RECONCILE_TAG: "a"})
    now[0] += 22.5 * 60
    third = tick(second.cursor)
    assert not third.run_requests
    assert isinstance(third.skip_reason, SkipReason)
    assert "still running" in (third.skip_reason.skip_message or "")


def test_sensor_disabled(instance: DagsterInstance, conf: Path) -> None:
    (conf / "platform.yaml").write_text("reconcile: {enabled: false}\n")
    context = build_sensor_context(
        instance=instance, resources={"platform": PlatformResource(conf_dir=str(conf))}
    )
    result = build_reconcile_sensor()(context)
    assert isinstance(result, SkipReason)
