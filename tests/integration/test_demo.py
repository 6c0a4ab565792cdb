"""The README's first command, checked as a user would (GraphQL instead of eyes)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

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
    result = check_demo(project, timeout=240)
    assert result.run_status == "STARTED", result.log_tail
    assert result.materializations > 0, result.log_tail
    assert result.rows_reported > 0
    assert result.leftovers == [], f"left running after Ctrl-C: {result.leftovers}"
