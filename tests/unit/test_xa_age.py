"""The age of the oldest held prepared XA transaction, and the warning as it nears the
server's binlog retention (after the purge a restart cannot read its rows again)."""

from __future__ import annotations

import logging

import pytest

from cdc_platform.source.stream.xa import XaAge

pytestmark = pytest.mark.unit


def test_the_age_warns_once_per_transaction_at_half_the_retention(
    caplog: pytest.LogCaptureFixture,
) -> None:
    asked: list[int] = []

    def retention() -> float:
        asked.append(1)
        return 7200.0

    watch = XaAge(retention, lambda: "db:3306")
    assert watch.age(None, 1000.0) is None
    assert not asked, "the server is asked only once something is held"
    with caplog.at_level(logging.WARNING):
        assert watch.age(("X'61',X'',1", 1000), 1000.0 + 3599) == 3599
        assert not caplog.records
        assert watch.age(("X'61',X'',1", 1000), 1000.0 + 3600) == 3600
        assert watch.age(("X'61',X'',1", 1000), 1000.0 + 5000) == 5000
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 1
    assert "X'61',X'',1" in warned[0]
    assert "XA RECOVER" in warned[0]
    assert len(asked) == 1, "the retention is read once"


@pytest.mark.parametrize("retention", [None, 0.0])
def test_no_warning_without_a_known_retention(
    retention: float | None, caplog: pytest.LogCaptureFixture
) -> None:
    """0: the server keeps binlogs for ever; None: it could not be asked (asked again later)."""
    asked: list[int] = []

    def read() -> float | None:
        asked.append(1)
        return retention

    watch = XaAge(read, lambda: "db:3306")
    with caplog.at_level(logging.WARNING):
        watch.age(("x", 0), 10**9)
        watch.age(("x", 0), 10**9 + 1)
        watch.age(("x", 0), 10**9 + 61)
    assert not caplog.records
    assert len(asked) == (2 if retention is None else 1)  # unknown: again after a minute
