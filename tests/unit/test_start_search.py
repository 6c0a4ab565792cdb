"""The start-by-timestamp search over a binlog given by fakes: which file it scans from,
and that finding no transaction head in a binlog with events is an error, never "now"."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from cdc_platform.errors import StartPositionError
from cdc_platform.events import ResumePosition
from cdc_platform.source.stream.start_position import BinlogFiles, TransactionHead, find_time

pytestmark = pytest.mark.unit

T = 1_800_000_000
END = ResumePosition("b.000004", 999)


def stamp(seconds: int) -> str:
    import time  # noqa: PLC0415 (this test's subject, imported where it is used)

    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def binlog(
    created: dict[str, int],
    heads: list[TransactionHead],
    *,
    events: frozenset[str] = frozenset(),
) -> tuple[BinlogFiles, list[str]]:
    files = sorted(created)
    scanned: list[str] = []

    def from_file(file: str) -> Iterator[TransactionHead]:
        scanned.append(file)
        yield from (h for h in heads if files.index(h.file) >= files.index(file))

    return (
        BinlogFiles(
            created=created.__getitem__,
            heads=from_file,
            holds_events=lambda file: file in events or any(h.file == file for h in heads),
            end=lambda: END,
        ),
        scanned,
    )


def head(file: str, pos: int, at: int, gtid: str | None = "0-1-1") -> TransactionHead:
    return TransactionHead(file, pos, at, gtid)


FILES = {"b.000001": T, "b.000002": T + 100, "b.000003": T + 200, "b.000004": T + 300}


def test_the_file_is_chosen_by_creation_time_not_by_its_first_transaction() -> None:
    """b.000003 begins with a long statement from T+150 (committed after the rotation at
    T+200); the transaction of T+180 sits in b.000002 and must be found."""
    heads = [
        head("b.000001", 4, T + 10),
        head("b.000002", 4, T + 120),
        head("b.000002", 500, T + 180),
        head("b.000003", 4, T + 150),
        head("b.000003", 400, T + 250),
    ]
    files, scanned = binlog(FILES, heads)
    found = find_time(sorted(FILES), stamp(T + 170), "b.000001:4", files)
    assert found == ResumePosition("b.000002", 500)
    assert scanned[-1] == "b.000002"  # the last file created before the target


def test_a_target_after_the_last_transaction_starts_at_the_end() -> None:
    files, _ = binlog(FILES, [head("b.000001", 4, T + 10), head("b.000003", 4, T + 210)])
    assert find_time(sorted(FILES), stamp(T + 400), "b.000001:4", files) == END


def test_no_transaction_head_in_a_binlog_with_events_is_an_error() -> None:
    """MySQL without GTIDs before anonymous GTIDs were recognised: rows events, no head."""
    files, _ = binlog(FILES, [], events=frozenset({"b.000003"}))
    with pytest.raises(StartPositionError, match="no transaction start"):
        find_time(sorted(FILES), stamp(T + 250), "b.000001:4", files)


def test_an_empty_binlog_starts_at_the_end() -> None:
    files, _ = binlog(FILES, [])
    assert find_time(sorted(FILES), stamp(T + 250), "b.000001:4", files) == END


def test_anonymous_heads_count_as_transaction_starts() -> None:
    heads = [head("b.000002", 4, T + 120, None), head("b.000002", 300, T + 130, None)]
    files, _ = binlog(FILES, heads)
    found = find_time(sorted(FILES), stamp(T + 125), "b.000001:4", files)
    assert found == ResumePosition("b.000002", 300)


def test_a_time_before_the_oldest_transaction_is_refused() -> None:
    files, _ = binlog(FILES, [head("b.000001", 4, T + 10)])
    with pytest.raises(StartPositionError, match="older than the oldest binlog") as caught:
        find_time(sorted(FILES), stamp(T + 5), "b.000001:4", files)
    assert caught.value.oldest == "b.000001:4"
