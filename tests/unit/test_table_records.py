"""A destination's records of its tables: typed, versioned, older files still load."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cdc_platform.errors import SnapshotError
from cdc_platform.sink.lake_files import LakeFile
from cdc_platform.sink.table_records import CapturedTables, RereadList

pytestmark = pytest.mark.unit


def _file(tmp_path: Path, data: dict[str, Any]) -> LakeFile:
    path = tmp_path / "record.json"
    path.write_text(json.dumps(data))
    return LakeFile(str(path))


def test_captured_tables_written_before_versions_and_ends_still_load(tmp_path: Path) -> None:
    record = CapturedTables.load(_file(tmp_path, {"tables": ["s.b", "s.a"], "after_batch": 7}))
    assert (record.tables, record.ended, record.after_batch, record.filters, record.exists) == (
        {"s.a", "s.b"},
        {},
        7,
        None,
        True,
    )
    record.save()  # written back in the current format
    assert record.path.read_json() == {
        "v": 2,
        "tables": ["s.a", "s.b"],
        "ended": {},
        "after_batch": 7,
        "filters": None,
    }


def test_captured_tables_round_trip_and_refuse_a_newer_format(tmp_path: Path) -> None:
    stored = {
        "v": 2,
        "tables": ["s.a"],
        "ended": {"s.gone": "dropped"},
        "after_batch": None,
        "filters": [["s\\..*"], []],
    }
    assert CapturedTables.load(_file(tmp_path, stored)).to_json() == stored
    with pytest.raises(SnapshotError, match="unknown record version 3"):
        CapturedTables.load(_file(tmp_path, {**stored, "v": 3}))
    none = CapturedTables.load(LakeFile(str(tmp_path / "none.json")))
    assert (none.tables, none.exists) == (set(), False)


def test_reread_list_marks_each_listing_and_keeps_a_newer_one(tmp_path: Path) -> None:
    path = _file(tmp_path, {"v": 1, "tables": {"s.a": 1}, "next": 2})
    listed = RereadList.from_json(path, path.read_json())
    assert listed == RereadList({"s.a": 1}, 2)
    again = listed.listing(["s.b", "s.a"])  # s.a listed again: a new mark, at the end
    assert list(again.tables.items()) == [("s.b", 2), ("s.a", 3)]
    assert again.to_json() == {"v": 1, "tables": {"s.b": 2, "s.a": 3}, "next": 4}
    assert again.without({"s.a": 1, "s.b": 2}) == RereadList({"s.a": 3}, 4)
    assert RereadList.from_json(path, None) == RereadList()
    with pytest.raises(SnapshotError, match="unknown record version None"):
        RereadList.from_json(path, {"tables": {}})
