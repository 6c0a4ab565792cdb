"""The change log's log retention: long by default, a warning when set below ten minutes."""

from __future__ import annotations

import logging

import pytest

from cdc_platform.sink.maintenance import (
    SAFE_LOG_RETENTION_SECONDS,
    MaintenancePolicy,
    interval_seconds,
)

pytestmark = pytest.mark.unit


def test_the_default_is_well_above_any_pause(caplog: pytest.LogCaptureFixture) -> None:
    policy = MaintenancePolicy()
    assert policy.log_retention is not None
    seconds = interval_seconds(policy.log_retention)
    assert seconds is not None
    assert seconds > SAFE_LOG_RETENTION_SECONDS
    assert policy.table_configuration()["delta.logRetentionDuration"] == policy.log_retention
    assert "log_retention" not in caplog.text


@pytest.mark.parametrize("short", ["interval 1 minute", "interval 0 seconds", "interval 9 minutes"])
def test_a_short_retention_is_warned_about(short: str, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="cdc_platform.sink"):
        MaintenancePolicy(log_retention=short)
    assert f"log_retention {short!r} is below 10 minutes" in caplog.text


@pytest.mark.parametrize("long", ["interval 10 minutes", "interval 2 hours", "interval 30 days"])
def test_a_long_retention_is_not(long: str, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="cdc_platform.sink"):
        MaintenancePolicy(log_retention=long)
    assert "log_retention" not in caplog.text


def test_delta_intervals_are_read_in_seconds() -> None:
    assert interval_seconds("interval 15 minutes") == 900.0
    assert interval_seconds("INTERVAL 1 Hour") == 3600.0
    assert interval_seconds("interval 1 week") == 604800.0
    assert interval_seconds("15 minutes") is None
    assert interval_seconds("interval 3 fortnights") is None
