"""The kept DDL history: each binlog event scanned once, questions answered from what is kept.

A fake server answers ``SHOW BINARY LOGS`` and ``SHOW BINLOG EVENTS IN f FROM p`` from an
in-memory binlog of two files; the index is asked as the reader asks it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from cdc_platform.source.stream.ddl_index import DdlIndex

pytestmark = pytest.mark.unit

Row = tuple[str, int, str, int, int, str]


class FakeBinlog:
    def __init__(self) -> None:
        self.files: dict[str, list[Row]] = {}
        self.read = 0

    def add(self, file: str, kind: str, info: str = "") -> int:
        events = self.files.setdefault(file, [])
        pos = events[-1][4] if events else 4
        events.append((file, pos, kind, 1, pos + 10, info))
        return pos

    def cursor(self, *_: Any) -> FakeCursor:
        return FakeCursor(self)


class FakeCursor:
    def __init__(self, binlog: FakeBinlog) -> None:
        self._binlog = binlog
        self._rows: Iterator[Any] = iter(())

    def __enter__(self) -> FakeCursor:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def execute(self, sql: str, args: tuple[str] | None = None) -> None:
        if sql == "SHOW BINARY LOGS":
            self._rows = iter([(f, rows[-1][4]) for f, rows in self._binlog.files.items()])
            return
        pos = int(sql.rsplit(" ", 1)[1])
        assert args is not None
        rows = self._binlog.files[args[0]]
        assert pos in {row[1] for row in rows} | {rows[-1][4]}, "not an event's start"
        self._rows = iter([row for row in rows if row[1] >= pos])

    def fetchall(self) -> list[Any]:
        return list(self._rows)

    def __iter__(self) -> Iterator[Any]:
        for row in self._rows:
            self._binlog.read += 1
            yield row


def _rows(binlog: FakeBinlog, count: int, file: str = "bin.000001") -> None:
    for _ in range(count):
        binlog.add(file, "Table_map")
        binlog.add(file, "Write_rows_v1")
        binlog.add(file, "Xid")


def test_each_event_is_scanned_once_whatever_the_questions() -> None:
    binlog = FakeBinlog()
    first = binlog.add("bin.000001", "Table_map")
    _rows(binlog, 5)
    a = binlog.add("bin.000001", "Query", "use `db`; ALTER TABLE b ADD COLUMN w INT")
    _rows(binlog, 5)
    binlog.add("bin.000001", "Rotate")
    binlog.add("bin.000002", "Format_desc")
    b = binlog.add("bin.000002", "Query", "use `db`; CREATE TABLE x (id INT)")
    binlog.add("bin.000002", "Query", "use `db`; INSERT INTO x VALUES (1)")
    _rows(binlog, 5, "bin.000002")
    index = DdlIndex()
    total = sum(len(rows) for rows in binlog.files.values())
    got = index.after(binlog, "s1", "bin.000001", first + 10)
    assert [(s.file, s.pos) for s in got] == [("bin.000001", a), ("bin.000002", b)]
    assert binlog.read == total - 1
    # asked again after each DDL, further on: nothing read again, the passed DDL dropped
    assert [s.pos for s in index.after(binlog, "s1", "bin.000001", a + 10)] == [b]
    assert [s.pos for s in index.after(binlog, "s1", "bin.000002", b + 10)] == []
    assert binlog.read == total - 1
    # written since: only that is read
    c = binlog.add("bin.000002", "Query", "use `db`; DROP TABLE x")
    assert [s.pos for s in index.after(binlog, "s1", "bin.000002", b + 10)] == [c]
    assert binlog.read == total
    assert index.scanned_events == total


def test_a_question_from_further_back_scans_only_the_part_before() -> None:
    binlog = FakeBinlog()
    _rows(binlog, 3)
    a = binlog.add("bin.000001", "Query", "use `db`; ALTER TABLE b MODIFY c UUID")
    _rows(binlog, 3)
    b = binlog.add("bin.000001", "Query", "use `db`; RENAME TABLE b TO b2")
    _rows(binlog, 3)
    index = DdlIndex()
    assert [s.pos for s in index.after(binlog, "s1", "bin.000001", a + 10)] == [b]
    scanned = index.scanned_events
    # a reconnect restarts before it: the statements before are scanned, the rest kept
    assert [s.pos for s in index.after(binlog, "s1", "bin.000001", 4)] == [a, b]
    assert index.scanned_events - scanned == 9 + 1  # three transactions and the ALTER


def test_another_server_starts_afresh() -> None:
    binlog = FakeBinlog()
    a = binlog.add("bin.000001", "Query", "use `db`; ALTER TABLE b MODIFY c UUID")
    index = DdlIndex()
    assert [s.pos for s in index.after(binlog, "s1", "bin.000001", 4)] == [a]
    other = FakeBinlog()
    _rows(other, 2)
    assert index.after(other, "s2", "bin.000001", 4) == []
    assert index.after(other, "s2", "bin.000009", 4) == []  # not a file it has
