"""What the Dagster UI shows of the change log, the sensors, a carried check (issue 44.3/7/9)."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest
from dagster import (
    AssetCheckEvaluation,
    AssetCheckSeverity,
    AssetKey,
    DagsterInstance,
    MetadataValue,
)

from cdc_platform.config import load_config
from cdc_platform.coordination.table_catalog import Catalog
from cdc_platform.sink.schema import CHANGE_LOG_SCHEMA
from dagster_defs import build_definitions
from dagster_defs.assets import change_log_specs
from dagster_defs.check_carry import CARRIED_FROM_RUN, carry
from dagster_defs.freshness import freshness_policy
from dagster_defs.sensors import build_config_monitor
from tests.unit.test_sensors import INSTANCE, put, tick

pytestmark = pytest.mark.unit


@pytest.fixture
def conf(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("CDC_SOURCE_PASSWORD", "x")
    root = tmp_path / "conf"
    (root / "destinations").mkdir(parents=True)
    (root / "platform.yaml").write_text(f"lake_root: {tmp_path / 'lake'}\n")
    put(root, "shop", INSTANCE.format(server_id=1))
    return root


def test_the_change_log_page_says_what_produces_it(conf: Path) -> None:
    """Its columns, a freshness policy, who materializes it; no glossary of metadata keys."""
    (spec,) = change_log_specs(load_config(conf))
    schema = spec.metadata["dagster/column_schema"]
    assert [c.name for c in schema.columns] == CHANGE_LOG_SCHEMA.names
    assert all(c.description for c in schema.columns)
    assert spec.freshness_policy == freshness_policy(300)
    description = spec.description or ""
    assert "job `cdc_destination`" in description
    assert "`batch_seq`" not in description  # the metadata's meanings are in docs/dagster.md
    assert spec.metadata["materialized_by"] == "job cdc_destination, run tag cdc/destination=shop"


@pytest.mark.parametrize(
    ("budget", "fail", "warn"),
    [(300, 300, 120), (60, 60, None), (30, 60, None), (120, 120, 60), (600, 600, 300)],
)
def test_the_warning_window_is_whole_minutes(budget: float, fail: int, warn: int | None) -> None:
    """Dagster's UI shows the window in rounded minutes: 150 s read "3 minutes"."""
    policy = freshness_policy(budget)
    assert policy.fail_window.to_timedelta() == timedelta(seconds=fail)
    got = policy.warn_window.to_timedelta() if policy.warn_window else None
    assert got == (timedelta(seconds=warn) if warn else None)


def test_the_reconciliation_sensor_is_named_a_sensor(conf: Path) -> None:
    defs = build_definitions(str(conf), catalogs={"shop": Catalog("shop")})
    names = {s.name for s in defs.sensors or []}
    assert "reconcile_sensor" in names
    assert "reconcile_schedule" not in names


def test_a_changed_file_without_a_live_run_is_a_start(
    instance: DagsterInstance, conf: Path
) -> None:
    """A demo started again finds its old cursor (same DAGSTER_HOME) and a new file: that is
    no reload of anything running (its run was tagged `config changed`)."""
    cursor = json.dumps({"seen": {"shop": "an older hash"}, "cancel": []})
    result = tick(build_config_monitor(), instance, conf, cursor)
    (request,) = result.run_requests or []
    assert request.tags["cdc/reason"] == "config added"


def test_a_carried_verdict_keeps_its_outcome_and_origin() -> None:
    key = AssetKey(["cdc", "shop", "shop", "orders"])
    failed = AssetCheckEvaluation(
        asset_key=key,
        check_name="reconciled",
        passed=False,
        severity=AssetCheckSeverity.WARN,
        description="3 rows differed and were repaired",
        metadata={"differences": MetadataValue.int(3)},
    )
    carried = carry(failed, "run-1", 1_700_000_000.0)
    assert (carried.passed, carried.severity) == (False, AssetCheckSeverity.WARN)  # still red
    assert carried.description == failed.description
    assert carried.metadata["differences"].value == 3
    assert carried.metadata[CARRIED_FROM_RUN].value == "run-1"
    assert carried.metadata["reconciled_at"].value == 1_700_000_000.0
    again = carry(carried, "run-2", 1_700_000_100.0)  # carried on by the next materialization
    assert again.metadata[CARRIED_FROM_RUN].value == "run-1"
    assert again.metadata["reconciled_at"].value == 1_700_000_000.0
