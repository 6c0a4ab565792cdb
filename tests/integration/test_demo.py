"""The README's first command, checked as a user would (GraphQL instead of eyes).

Set ``CDC_SCREENSHOTS=<dir>`` to also get headless-Chromium screenshots of the asset graph, a
mirror's page and the automation page there (the demo then runs until a mirror was
materialized twice)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from dagster import DagsterInstance, DagsterRunStatus, RunsFilter

from cdc_platform.testing.demo_check import check_demo

pytestmark = pytest.mark.integration

PROJECT = Path(__file__).resolve().parents[2]


def test_demo_streams_under_dagster_and_stops_cleanly(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    shutil.copytree(PROJECT / "conf", project / "conf")
    shutil.copy(PROJECT / "workspace.yaml", project / "workspace.yaml")
    (project / "dagster_home").mkdir()
    shutil.copy(
        PROJECT / "dagster_home" / "dagster.yaml", project / "dagster_home" / "dagster.yaml"
    )
    shots = os.environ.get("CDC_SCREENSHOTS")
    result = check_demo(
        project, timeout=600 if shots else 240, screenshots=Path(shots) if shots else None
    )
    assert result.run_status == "STARTED", result.log_tail
    assert result.materializations > 0, result.log_tail
    assert result.rows_reported > 0
    assert result.leftovers == [], f"left running after Ctrl-C: {result.leftovers}"
    # Ctrl-C is a requested stop: the live run ends quietly (SUCCESS), not FAILURE.
    instance = DagsterInstance.from_config(str(project / "dagster_home"))
    try:
        runs = instance.get_runs(filters=RunsFilter(tags={"cdc/destination": "shop"}))
        assert runs
        assert {r.status for r in runs} == {DagsterRunStatus.SUCCESS}
    finally:
        instance.dispose()
