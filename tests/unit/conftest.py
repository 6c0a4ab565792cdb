"""Fixtures of the unit tests of the Dagster face's sensors and schedules."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from dagster import DagsterInstance, instance_for_test

INSTANCE_YAML = """\
source:
  user: cdc
  password_env: CDC_SOURCE_PASSWORD
  server_id: {server_id}
"""
"""The smallest valid destination: its password from the environment."""


@pytest.fixture
def instance() -> Iterator[DagsterInstance]:
    """A temporary Dagster instance (runs, events, cursors)."""
    with instance_for_test() as inst:
        yield inst


@pytest.fixture
def two_destinations_conf(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A conf directory of destinations ``a`` and ``b`` reconciled every 15-30 minutes."""
    monkeypatch.setenv("CDC_SOURCE_PASSWORD", "x")
    root = tmp_path / "conf"
    for i, name in enumerate(["a", "b"]):
        (root / "destinations" / name).mkdir(parents=True)
        (root / "destinations" / name / "instance.yaml").write_text(
            INSTANCE_YAML.format(server_id=i + 1)
        )
    (root / "platform.yaml").write_text("reconcile: {interval_minutes: [15, 30]}\n")
    return root
