"""Which files a compaction merges (per partition, its small files in seq order) and the Delta
statistics of the merged file."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from cdc_platform.sink.compaction_plan import FileGroup, SmallFile, merged_stats, plan_groups

pytestmark = pytest.mark.unit


def action(
    db: str | None,
    table: str | None,
    low: int | None,
    high: int | None,
    size: int,
    *,
    rows: int | None = 10,
) -> dict[str, Any]:
    """One add action as ``get_add_actions(flatten=False)`` gives it."""
    return {
        "path": f"db={db}/table={table}/f{low}.parquet",
        "size_bytes": size,
        "num_records": rows,
        "min": {"seq": low},
        "max": {"seq": high},
        "null_count": {"seq": 0},
        "partition": {"db": db, "table": table},
    }


def spans(groups: list[FileGroup]) -> list[tuple[str | None, str | None, list[int]]]:
    return [(g.db, g.table, [f.first_seq for f in g.files]) for g in groups]


def test_partitions_with_two_small_files_get_a_group_in_seq_order() -> None:
    actions = [
        action("a", "t", 21, 30, 100),
        action("a", "t", 1, 10, 100),
        action("a", "u", 11, 20, 100),  # one small file: nothing to merge
        action("b", None, 31, 31, 10),
        action("b", None, 40, 40, 10),
        action("a", "t", 41, 50, 10_000),  # big: not merged
    ]
    groups = plan_groups(actions, 1000)
    assert spans(groups) == [("a", "t", [1, 21]), ("b", None, [31, 40])]
    assert groups[0].files[0].path == "db=a/table=t/f1.parquet"
    assert groups[0].rows == 20
    assert groups[1].partition_values == {"db": "b", "table": None}


def test_a_partition_with_a_file_without_statistics_is_left_alone() -> None:
    actions = [
        action("a", "t", 1, 2, 1),
        action("a", "t", 3, 4, 1),
        action("a", "t", None, None, 1),
        action("b", "t", 1, 2, 1),
        action("b", "t", 3, 4, 1, rows=None),
    ]
    assert plan_groups(actions, 1000) == []


def test_a_byte_cap_takes_the_oldest_small_files_and_leaves_the_rest() -> None:
    actions = [action("a", "t", 10 * i + 1, 10 * i + 10, 400) for i in range(5)]
    actions.append(action("b", "u", 100, 100, 400))
    actions.append(action("b", "u", 101, 101, 400))
    all_files = [("a", "t", [1, 11, 21, 31, 41]), ("b", "u", [100, 101])]
    assert spans(plan_groups(actions, 1000)) == all_files
    # 1,000 bytes: two files of a (at least two even when they pass the cap), then nothing
    assert spans(plan_groups(actions, 1000, max_bytes=1000)) == [("a", "t", [1, 11])]
    assert spans(plan_groups(actions, 1000, max_bytes=1300)) == [("a", "t", [1, 11, 21])]
    assert spans(plan_groups(actions, 1000, max_bytes=2800)) == all_files


def small(rows: int, low: dict[str, Any], high: dict[str, Any], nulls: dict[str, int]) -> SmallFile:
    return SmallFile("p", 1, rows, 0, 0, {"min": low, "max": high, "null_count": nulls})


def test_merged_statistics_are_the_union_of_the_files() -> None:
    early = datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=UTC)
    late = datetime(2026, 1, 2, 3, 4, 6, tzinfo=UTC)
    files = [
        small(3, {"seq": 1, "op": "c", "ts": late}, {"seq": 3, "op": "u", "ts": late},
              {"seq": 0, "op": 0, "ts": 0, "gtid": 0}),
        small(2, {"seq": 4, "op": "d", "ts": early}, {"seq": 5, "op": "d", "ts": late},
              {"seq": 0, "op": 0, "ts": 0}),
    ]  # fmt: skip
    stats = json.loads(merged_stats(files))
    assert stats == {
        "numRecords": 5,
        "minValues": {"seq": 1, "op": "c", "ts": "2026-01-02T03:04:05.678Z"},
        "maxValues": {"seq": 5, "op": "u", "ts": "2026-01-02T03:04:06.000Z"},
        "nullCount": {"seq": 0, "op": 0, "ts": 0},  # gtid: one file has no count
    }


def test_a_column_without_a_bound_in_a_file_keeps_none_unless_that_file_is_all_null() -> None:
    files = [
        small(3, {"seq": 1, "gtid": "0-1-1"}, {"seq": 3, "gtid": "0-1-3"}, {"gtid": 0}),
        small(2, {"seq": 4}, {"seq": 5}, {"gtid": 2}),  # gtid all null here
        small(2, {"seq": 6}, {"seq": 7, "gtid": "0-1-9"}, {"gtid": 1}),  # min unknown
    ]
    stats = json.loads(merged_stats(files))
    assert stats["minValues"] == {"seq": 1}  # gtid's minimum is not known for the third file
    assert stats["maxValues"] == {"seq": 7, "gtid": "0-1-9"}
    assert stats["nullCount"] == {"gtid": 3}
    assert json.loads(merged_stats(files[:2]))["minValues"] == {"seq": 1, "gtid": "0-1-1"}
