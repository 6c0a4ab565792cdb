"""The list of tables to re-read after DDL, and which DDL rows put a table on it."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdc_platform.backfill.reread import (
    RereadRecord,
    pending_rereads,
    tables_to_reread,
)
from cdc_platform.sink.destination_lake import DestinationLake

pytestmark = pytest.mark.unit


def test_a_table_listed_again_during_its_copy_stays_listed(tmp_path: Path) -> None:
    record = RereadRecord(DestinationLake.at(tmp_path, "d").reread_tables)
    assert record.load() == {}
    record.add(["s.a", "s.b"])
    taken = record.load()
    assert list(taken) == ["s.a", "s.b"]
    record.add(["s.a"])  # a second DDL on s.a while the copy of the first runs
    record.remove(taken)
    assert list(record.load()) == ["s.a"]
    assert pending_rereads(DestinationLake.at(tmp_path, "d")) == {"s.a"}
    record.remove(record.load())
    assert not DestinationLake.at(tmp_path, "d").reread_tables.exists()
    assert pending_rereads(DestinationLake.at(tmp_path, "d")) == set()


def test_only_the_recorded_table_of_a_ddl_row_is_listed() -> None:
    rows = [
        ("s", "a", "ALTER TABLE a ADD c INT DEFAULT 1"),
        ("s", "x", "ALTER TABLE x ADD c INT"),  # NULL for every row: nothing to read
        ("s", "t", "ALTER TABLE t EXCHANGE PARTITION p WITH TABLE u"),  # u: not captured
        ("s", "old", "RENAME TABLE old TO new"),  # gone: nothing to read
        ("s", "new", "RENAME TABLE old TO new"),
        ("s", "a", "ALTER TABLE a MODIFY c BIGINT"),
    ]
    assert tables_to_reread(rows) == ["s.a", "s.t", "s.new"]
