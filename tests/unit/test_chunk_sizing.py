"""The snapshot's chunk size: fixed, or adapted to a time per chunk."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from cdc_platform.backfill.chunk_sizing import (
    DEFAULT_CHUNK_SECONDS,
    DEFAULT_FIRST_CHUNK,
    ChunkSizer,
)
from cdc_platform.config.instance import SnapshotSettings

pytestmark = pytest.mark.unit


def test_a_fixed_size_never_changes() -> None:
    sizer = ChunkSizer.for_settings(300, 0.5)
    for seconds in (0.001, 10.0):
        sizer.observe(300, 300, seconds)
    assert (sizer.rows, sizer.adaptive) == (300, False)


def test_unset_size_starts_at_the_default_and_grows_at_most_twofold() -> None:
    sizer = ChunkSizer.for_settings(None, None)
    assert (sizer.rows, sizer.target_seconds) == (DEFAULT_FIRST_CHUNK, DEFAULT_CHUNK_SECONDS)
    sizer.observe(2000, 2000, 0.01)  # 100 times faster than the target: doubles only
    assert sizer.rows == 4000
    sizer.observe(4000, 4000, 0.4)  # 10,000 rows/s -> 5,000 rows in 0.5 s
    assert sizer.rows == 5000


def test_a_slow_chunk_shrinks_the_next_by_at_most_half_and_never_below_the_floor() -> None:
    sizer = ChunkSizer(8000, 0.5, min_rows=1000, max_rows=10_000)
    sizer.observe(8000, 8000, 40.0)
    assert sizer.rows == 4000
    sizer.observe(4000, 4000, 1.0)  # 2,000 rows in 0.5 s
    assert sizer.rows == 2000
    for _ in range(5):
        sizer.observe(sizer.rows, sizer.rows, 60.0)
    assert sizer.rows == 1000


def test_the_ceiling_holds_and_a_short_last_chunk_teaches_nothing() -> None:
    sizer = ChunkSizer(6000, 0.5, max_rows=10_000)
    sizer.observe(6000, 6000, 0.001)
    assert sizer.rows == 10_000
    sizer.observe(10_000, 17, 5.0)  # the table's end: 17 rows in a slow chunk
    assert sizer.rows == 10_000
    assert ChunkSizer(1, 0.5, min_rows=100).rows == 100


@pytest.mark.parametrize(
    ("rows", "seconds", "low", "high"), [(0, 0.5, 1, 2), (5, 0.0, 1, 2), (5, 0.5, 3, 2)]
)
def test_bad_settings_are_refused(rows: int, seconds: float, low: int, high: int) -> None:
    with pytest.raises(ValueError, match="chunk"):
        ChunkSizer(rows, seconds, min_rows=low, max_rows=high)


def test_the_config_sizes_by_time_unless_a_chunk_size_is_set() -> None:
    default = SnapshotSettings()
    assert (default.chunk_size, default.chunk_seconds) == (None, DEFAULT_CHUNK_SECONDS)
    assert ChunkSizer.for_settings(default.chunk_size, default.chunk_seconds).adaptive
    fixed = SnapshotSettings.model_validate({"chunk_size": 700})
    assert ChunkSizer.for_settings(fixed.chunk_size, fixed.chunk_seconds).rows == 700
    with pytest.raises(ValidationError, match="chunk_seconds"):
        SnapshotSettings.model_validate({"chunk_seconds": 0})
