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


def counted(low: int, high: int, size: int, rows: int) -> dict[str, object]:
    return {**action("a", "t", low, high, size), "num_records": rows}


def spans(part: PartitionRange) -> list[tuple[int, int]]:
    """The (first, last) seq of each piece, parsed back from its predicate."""
    found = []
    for text in part.pieces():
        low = int(text.split("seq >= ")[1].split(" ")[0])
        high = int(text.split("seq <= ")[1].rstrip(")"))
        found.append((low, high))
    return found


def test_a_range_is_cut_into_pieces_of_about_piece_rows_that_cover_it_exactly() -> None:
    # ten files of 10 rows each (seq 1-100), then one of 100 rows over seq 101-300
    actions = [counted(10 * i + 1, 10 * i + 10, 100, 10) for i in range(10)]
    actions.append(counted(101, 300, 100, 100))
    (part,) = plan_ranges(actions, 1000, piece_rows=25)
    assert (part.first_seq, part.last_seq, part.files) == (1, 300, 11)
    pieces = spans(part)
    # files are never split below piece_rows: 2 files (20 rows) a piece, then the big file
    # evenly by seq in 4 pieces of 25 rows
    assert pieces[:5] == [(1, 20), (21, 40), (41, 60), (61, 80), (81, 100)]
    assert pieces[5:] == [(101, 150), (151, 200), (201, 250), (251, 300)]
    assert part.predicate() == PartitionRange("a", "t", 1, 300, 11).predicate()


def test_pieces_count_the_rows_of_big_files_inside_the_range_too() -> None:
    actions = [
        counted(1, 10, 100, 10),
        counted(11, 40, 5000, 30),  # big: not merged for itself, but read again
        counted(41, 50, 100, 10),
    ]
    (part,) = plan_ranges(actions, 1000, piece_rows=20)
    assert spans(part) == [(1, 10), (11, 25), (26, 40), (41, 50)]


def test_without_row_counts_a_range_is_one_piece() -> None:
    actions = [action("a", "t", 1, 10, 100), action("a", "t", 11, 20, 100)]
    (part,) = plan_ranges(actions, 1000, piece_rows=1)
    assert spans(part) == [(1, 20)]
