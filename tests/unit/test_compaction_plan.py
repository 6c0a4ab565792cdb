"""Which files a compaction rewrites: per partition, the seq range of its small files."""

from __future__ import annotations

import pytest

from cdc_platform.sink.compaction import PartitionRange, plan_ranges

pytestmark = pytest.mark.unit


def action(
    db: str | None, table: str | None, low: int | None, high: int | None, size: int
) -> dict[str, object]:
    return {
        "partition.db": db,
        "partition.table": table,
        "min.seq": low,
        "max.seq": high,
        "size_bytes": size,
    }


def test_partitions_with_two_small_files_get_their_range() -> None:
    actions = [
        action("a", "t", 1, 10, 100),
        action("a", "t", 21, 30, 100),
        action("a", "u", 11, 20, 100),  # one small file: nothing to merge
        action("b", None, 31, 31, 10),
        action("b", None, 40, 40, 10),
        action("a", "t", 41, 50, 10_000),  # big: not a reason to rewrite
    ]
    assert plan_ranges(actions, 1000) == [
        PartitionRange("a", "t", 1, 30, 2),
        PartitionRange("b", None, 31, 40, 2),
    ]


def test_a_partition_with_a_file_without_statistics_is_left_alone() -> None:
    actions = [
        action("a", "t", 1, 2, 1),
        action("a", "t", 3, 4, 1),
        action("a", "t", None, None, 1),
    ]
    assert plan_ranges(actions, 1000) == []


def test_predicates_quote_names_and_nulls() -> None:
    text = PartitionRange("we'ird", None, 3, 9, 2).predicate()
    assert text == """("db" = 'we''ird' AND "table" IS NULL AND seq >= 3 AND seq <= 9)"""


def test_a_byte_cap_takes_the_oldest_small_files_and_leaves_the_rest() -> None:
    actions = [action("a", "t", 10 * i + 1, 10 * i + 10, 400) for i in range(5)]
    actions.append(action("b", "u", 100, 100, 400))
    actions.append(action("b", "u", 101, 101, 400))
    assert plan_ranges(actions, 1000) == [
        PartitionRange("a", "t", 1, 50, 5),
        PartitionRange("b", "u", 100, 101, 2),
    ]
    # 1,000 bytes: two files of a (at least two even when they pass the cap), then nothing
    assert plan_ranges(actions, 1000, max_bytes=1000) == [PartitionRange("a", "t", 1, 20, 2)]
    assert plan_ranges(actions, 1000, max_bytes=1300) == [PartitionRange("a", "t", 1, 30, 3)]
    assert plan_ranges(actions, 1000, max_bytes=2800) == [
        PartitionRange("a", "t", 1, 50, 5),
        PartitionRange("b", "u", 100, 101, 2),
    ]
