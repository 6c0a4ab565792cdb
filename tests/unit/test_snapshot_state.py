"""The snapshot's stored state: one record type, older files still load."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cdc_platform.errors import SnapshotError
from cdc_platform.sink.lake_files import LakeFile
from cdc_platform.sink.snapshot_progress import read_snapshot_progress
from cdc_platform.sink.snapshot_state import PendingChunk, SnapshotState, TableCounts

pytestmark = pytest.mark.unit

_WRITTEN = {
    "v": 1,
    "destination": "d",
    "tables": ["s.a", "s.b", "s.gone"],
    "index": 1,
    "after": [{"b64": "AQI="}, 7],
    "pending": {"batch_seq": 12, "chunk": 99, "index": 1, "after": [{"b64": "AQI="}, 9]},
    "ended": {"s.gone": "dropped"},
    "progress": {
        "s.a": {"rows_read": 10, "estimated_rows": 8, "chunks": 1},
        "s.b": {"rows_read": 4, "estimated_rows": 40, "chunks": 2},
    },
}
"""A state as the runner writes it (format 1, with every part)."""


def _file(tmp_path: Path, data: dict[str, Any]) -> LakeFile:
    path = tmp_path / "_snapshot_state.json"
    path.write_text(json.dumps(data))
    return LakeFile(str(path))


def test_a_stored_state_loads_and_is_written_back_unchanged(tmp_path: Path) -> None:
    state = SnapshotState.load(_file(tmp_path, _WRITTEN), "d")
    assert state is not None
    assert state.pending == PendingChunk(12, 99, 1, [{"b64": "AQI="}, 9])
    assert state.progress["s.b"] == TableCounts(4, 40, 2)
    assert state.to_json() == _WRITTEN
    state.save(out := LakeFile(str(tmp_path / "again.json")))
    assert out.read_json() == _WRITTEN


def test_a_state_written_before_marks_ends_and_progress_still_loads(tmp_path: Path) -> None:
    old = {
        "v": 1,
        "destination": "d",
        "tables": ["s.a", "s.b"],
        "index": 0,
        "after": [5],
        "pending": {"batch_seq": 3, "index": 0, "after": [6]},
    }
    state = SnapshotState.load(_file(tmp_path, old), "d")
    assert state == SnapshotState("d", ["s.a", "s.b"], 0, [5], PendingChunk(3, None, 0, [6]))
    assert state.ended == {}
    assert state.progress == {}
    assert [p.state for p in read_snapshot_progress(_file(tmp_path, old))] == [
        "copying",
        "waiting",
    ]


@pytest.mark.parametrize(
    "changed", [{"destination": "other"}, {"v": 2}, {"v": None}], ids=["other", "newer", "none"]
)
def test_a_state_of_another_destination_or_format_is_refused(
    tmp_path: Path, changed: dict[str, Any]
) -> None:
    with pytest.raises(SnapshotError, match="not a snapshot state of 'd'"):
        SnapshotState.load(_file(tmp_path, {**_WRITTEN, **changed}), "d")


def test_no_file_is_no_snapshot(tmp_path: Path) -> None:
    assert SnapshotState.load(LakeFile(str(tmp_path / "none.json")), "d") is None


def test_advancing_and_ending_move_to_the_next_place() -> None:
    state = SnapshotState("d", ["s.a", "s.b", "s.c"], pending=PendingChunk(1, 2, 0, None))
    state.advance(0, [4])
    assert (state.index, state.after, state.pending) == (0, [4], None)
    state.end("s.a", "gone")
    assert (state.index, state.after, state.ended) == (1, None, {"s.a": "gone"})
