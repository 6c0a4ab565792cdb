"""The reconciliation's randomized schedule: when each destination is due (no servers)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdc_platform.config import load_config
from cdc_platform.errors import ConfigError
from cdc_platform.reconcile.schedule import DueState, next_interval

pytestmark = pytest.mark.unit


def test_interval_is_uniform_between_min_and_max() -> None:
    assert next_interval((15, 30), lambda: 0.0) == 15 * 60
    assert next_interval((15, 30), lambda: 1.0) == 30 * 60
    assert next_interval((15, 30), lambda: 0.5) == 22.5 * 60


def test_due_state_first_sight_waits_then_fires_and_forgets_removed() -> None:
    state = DueState()
    assert state.due(["a", "b"], 1000.0, (1, 2), lambda: 0.0) == []  # first sight: scheduled
    assert state.next_due == {"a": 1060.0, "b": 1060.0}
    assert state.due(["a", "b"], 1059.0, (1, 2), lambda: 0.0) == []
    assert state.due(["a", "b"], 1060.0, (1, 2), lambda: 0.0) == ["a", "b"]
    state.reschedule("a", 1060.0, (1, 2), lambda: 1.0)
    assert state.next_due["a"] == 1180.0
    assert state.due(["a"], 1061.0, (1, 2)) == []
    assert set(state.next_due) == {"a"}
    again = DueState.from_cursor(state.to_cursor())
    assert again.next_due == state.next_due
    assert DueState.from_cursor("not json").next_due == {}


def test_config_rejects_inverted_interval(tmp_path: Path) -> None:
    conf = tmp_path / "conf"
    (conf / "destinations").mkdir(parents=True)
    (conf / "platform.yaml").write_text("reconcile: {interval_minutes: [30, 15]}\n")
    with pytest.raises(ConfigError, match="interval_minutes"):
        load_config(conf)
