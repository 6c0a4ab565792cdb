"""The headroom of the committed position against the server's binlog retention: the gauge
and the warning that come before a binlog gap."""

from __future__ import annotations

import logging
import math

import pytest

from cdc_platform.runtime.prometheus import PrometheusMetrics
from cdc_platform.source.stream.retention import RetentionHeadroom

pytestmark = pytest.mark.unit


def test_the_headroom_is_the_retention_minus_the_lag_and_warns_once_below_half(
    caplog: pytest.LogCaptureFixture,
) -> None:
    headroom = RetentionHeadroom(lambda: 7200.0, lambda: "db:3306")
    with caplog.at_level(logging.WARNING):
        assert headroom.headroom(1000.0, 1000.0 + 10) == 7190
        assert headroom.headroom(1000.0, 1000.0 + 3600) == 3600
        assert not caplog.records
        assert headroom.headroom(1000.0, 1000.0 + 3601) == 3599
        assert headroom.headroom(1000.0, 1000.0 + 8000) == -800  # may be gone already
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 1, warned
    assert "db:3306" in warned[0]
    assert "3599 s are left" in warned[0]


def test_a_destination_that_caught_up_is_warned_again_next_time(
    caplog: pytest.LogCaptureFixture,
) -> None:
    headroom = RetentionHeadroom(lambda: 100.0, lambda: "db:3306")
    with caplog.at_level(logging.WARNING):
        headroom.headroom(0.0, 60.0)
        headroom.headroom(59.0, 60.0)  # caught up
        headroom.headroom(59.0, 120.0)
    assert len(caplog.records) == 2


def test_unknown_and_everlasting_retentions() -> None:
    """None: not asked yet or the server is down (asked again a minute later); 0: kept for
    ever; no commit yet: nothing to measure."""
    answers: list[float | None] = [None, 0.0]
    headroom = RetentionHeadroom(lambda: answers.pop(0), lambda: "db:3306")
    assert headroom.headroom(0.0, 10.0) is None
    assert headroom.headroom(0.0, 20.0) is None, "asked again only after a minute"
    assert headroom.headroom(0.0, 71.0) == math.inf
    assert headroom.headroom(None, 72.0) is None


def test_the_retention_is_asked_again_every_ten_minutes() -> None:
    """A DBA may shorten it while the destination runs."""
    answers = [3600.0, 600.0]
    asked: list[float] = []

    def retention() -> float:
        asked.append(1)
        return answers[len(asked) - 1]

    headroom = RetentionHeadroom(retention, lambda: "db:3306")
    assert headroom.headroom(0.0, 10.0) == 3590
    assert headroom.headroom(0.0, 300.0) == 3300
    assert headroom.headroom(0.0, 700.0) == -100
    assert len(asked) == 2


def test_the_gauge_is_nan_until_known_then_the_headroom() -> None:
    metrics = PrometheusMetrics()
    recorder = metrics.recorder("shop")
    sample = "cdc_binlog_retention_headroom_seconds"
    assert math.isnan(metrics.registry.get_sample_value(sample, {"destination": "shop"}) or 0.0)
    recorder.retention_headroom(1234.0)
    assert metrics.registry.get_sample_value(sample, {"destination": "shop"}) == 1234.0
    recorder.retention_headroom(math.inf)
    assert metrics.registry.get_sample_value(sample, {"destination": "shop"}) == math.inf
