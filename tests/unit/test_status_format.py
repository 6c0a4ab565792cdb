"""`cdc-platform status` lines: the holder's published figures are shown when present."""

from __future__ import annotations

import pytest

from cdc_platform.coordination.status import DestinationStatus, format_status
from cdc_platform.ha.members import HolderInfo
from cdc_platform.sink.snapshot_progress import TableProgress

pytestmark = pytest.mark.unit


def test_the_holders_figures_are_shown() -> None:
    status = DestinationStatus(
        "shop",
        "database",
        holder=HolderInfo("shop", "node-a", "r1", 3, active=True),
        batch_seq=812,
        table_epoch=3,
        position="mysql-bin.000003:1234",
        lag_seconds=0.9,
        committed_at=996.0,
        rows_per_second=118.0,
        buffer_fill=0.01,
        snapshot=[TableProgress("shop.t", "copying", rows_read=75, estimated_rows=100, chunks=3)],
        metrics_url="http://127.0.0.1:9464/metrics",
        published_at=1000.0,
    )
    text = format_status(status, now=1000.0)
    assert "holder node-a epoch 3" in text
    assert "lag: 0.9 s (reported 0 s ago)" in text
    assert "last commit: 4 s ago" in text
    assert "rows/s: 118, buffer fill: 1 %" in text
    assert "snapshot shop.t: copying, 75/~100 rows (75%), 3 chunks" in text
    assert "metrics: http://127.0.0.1:9464/metrics" in text


def test_without_published_figures_the_lines_say_so() -> None:
    text = format_status(DestinationStatus("shop", "database"), now=1000.0)
    assert "no holder" in text
    assert "lag: -" in text
    assert "rows/s" not in text
    assert "metrics:" not in text


def test_figures_of_a_stopped_run_are_marked_stale() -> None:
    status = DestinationStatus(
        "shop",
        "database",
        lag_seconds=0.9,
        metrics_url="http://127.0.0.1:9464/metrics",
        published_at=700.0,
    )
    text = format_status(status, now=1000.0)
    assert "lag: 0.9 s (stale: no run holds the lease; reported 300 s ago)" in text
    assert "metrics: http://127.0.0.1:9464/metrics (stale: no run holds the lease)" in text
    status.holder = HolderInfo("shop", "node-a", "r1", 3, active=True)
    assert "stale: not republished for 300 s" in format_status(status, now=1000.0)
    assert "stale" not in format_status(status, now=710.0)
