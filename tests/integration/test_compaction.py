"""The change log's own compaction (a fenced rewrite) on real Delta tables in a temp directory.

The S3 variants, including a stale compaction refused after a successor's, are in
``test_s3_maintenance.py``.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from deltalake import DeltaTable

from cdc_platform.sink import DeltaChangeLog, MaintenancePolicy
from cdc_platform.sink.compaction import (
    CompactionRows,
    commit_compaction,
    plan_compaction,
    read_compaction_rows,
)
from tests.integration.test_delta_sink import Binlog, read_rows, resume_of

pytestmark = pytest.mark.integration

NAMES = [
    ("shop", "orders"),
    ("we'ird", "ta'ble"),
    ("back\\slash", "pct%_x"),
    ("ünï", "表"),
    ("sp ace", 'dq"uote'),
]


def test_compaction_keeps_every_row_byte_for_byte_with_any_partition_name(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Rows of tables with quotes, backslashes, spaces and non-ASCII names, and DDL rows (null
    table), compacted many times: the log reads the same, row for row, before and after."""
    uri = tmp_path / "changes"
    policy = MaintenancePolicy(
        compact_every=2, vacuum_every=None, cleanup_every=None, reopen_every=None
    )
    sink = DeltaChangeLog(str(uri), "d", maintenance=policy)
    binlog = Binlog()
    caplog.set_level(logging.INFO, logger="cdc_platform.sink")
    batch = 0
    for round_ in range(4):
        for db, name in NAMES:
            batch += 1
            events = binlog.rows(3, db=db, table=name)
            if round_ == 1:
                events = binlog.ddl(f"ALTER TABLE t{batch} ADD c INT", db=db) + events
            sink.commit(events, batch_seq=batch, resume=resume_of(events), epoch=1)
    before_files = 4 * len(NAMES) + len(NAMES)  # a file per batch and per DDL partition
    table = DeltaTable(str(uri))
    compactions = [h for h in table.history() if h.get("cdc.operation") == "compaction"]
    assert len(compactions) == batch // 2 - 2  # the first two found one file per partition
    assert len(table.file_uris()) < before_files / 2
    assert "lost a commit race" not in caplog.text
    assert "failed" not in caplog.text
    rows = read_rows(uri)
    assert [r["seq"] for r in rows] == list(range(1, len(rows) + 1))
    assert {(r["db"], r["table"]) for r in rows if r["op"] != "ddl"} == set(NAMES)

    # the same rows as an uncompacted log of the same events
    plain_uri = tmp_path / "plain"
    plain = DeltaChangeLog(str(plain_uri), "d", maintenance=MaintenancePolicy.disabled())
    replayed = Binlog()
    batch = 0
    for round_ in range(4):
        for db, name in NAMES:
            batch += 1
            events = replayed.rows(3, db=db, table=name)
            if round_ == 1:
                events = replayed.ddl(f"ALTER TABLE t{batch} ADD c INT", db=db) + events
            plain.commit(events, batch_seq=batch, resume=resume_of(events), epoch=1)
    skip = {"committed_at"}
    assert [{k: v for k, v in r.items() if k not in skip} for r in rows] == [
        {k: v for k, v in r.items() if k not in skip} for r in read_rows(plain_uri)
    ]


def test_a_compaction_planned_before_any_commit_is_refused(tmp_path: Path) -> None:
    """A plan from an older snapshot never commits: not after a batch (which the rewrite would
    otherwise erase) and not after another compaction (which it would otherwise duplicate)."""
    uri = tmp_path / "changes"
    sink = DeltaChangeLog(str(uri), "d", maintenance=MaintenancePolicy.disabled())
    binlog = Binlog()
    for batch in range(1, 5):
        events = binlog.rows(2)
        sink.commit(events, batch_seq=batch, resume=resume_of(events), epoch=1)
    stale = DeltaTable(str(uri))
    plan = plan_compaction(stale, None)
    assert plan is not None
    rows = read_compaction_rows(stale, plan)
    events = binlog.rows(2)
    sink.commit(events, batch_seq=5, resume=resume_of(events), epoch=1)
    assert not commit_compaction(stale, plan, rows, target_size=None, metadata={})
    assert [r["seq"] for r in read_rows(uri)] == list(range(1, 11))

    # a fresh plan commits; a plan made before it does not
    first, second = DeltaTable(str(uri)), DeltaTable(str(uri))
    plans = [plan_compaction(t, None) for t in (first, second)]
    assert plans[0] is not None
    assert plans[1] is not None
    rows = [read_compaction_rows(t, p) for t, p in zip((first, second), plans, strict=True)]
    assert commit_compaction(first, plans[0], rows[0], target_size=None, metadata={})
    assert not commit_compaction(second, plans[1], rows[1], target_size=None, metadata={})
    assert [r["seq"] for r in read_rows(uri)] == list(range(1, 11))
    assert len(DeltaTable(str(uri)).file_uris()) == 1


def _interleaved_log(uri: Path, batches: int) -> None:
    """Two tables written in the same commits, so each partition's seq numbers have gaps."""
    sink = DeltaChangeLog(str(uri), "d", maintenance=MaintenancePolicy.disabled())
    binlog = Binlog()
    for batch in range(1, batches + 1):
        events = binlog.rows(5, table="a") + binlog.rows(3, table="b")
        sink.commit(events, batch_seq=batch, resume=resume_of(events), epoch=1)


def test_a_compaction_read_in_small_pieces_keeps_every_row_once(tmp_path: Path) -> None:
    """Pieces of at most 4 rows (a's files of 5 rows split in two, b's files of 3 one piece
    each): many queries feed the one fenced write, and the log reads the same, row for row,
    with the files merged."""
    uri = tmp_path / "changes"
    _interleaved_log(uri, 6)
    before = read_rows(uri)
    table = DeltaTable(str(uri))
    plan = plan_compaction(table, None, piece_rows=4)
    assert plan is not None
    assert [len(r.pieces()) for r in plan.ranges] == [12, 6]
    rows = read_compaction_rows(table, plan)
    assert rows.num_rows == len(before) == 48
    assert commit_compaction(table, plan, rows, target_size=None, metadata={})
    assert read_rows(uri) == before
    assert len(DeltaTable(str(uri)).file_uris()) == 2
    (last,) = DeltaTable(str(uri)).history(1)
    assert last["cdc.compaction.rows"] == "48"


def test_a_stale_compaction_in_pieces_is_refused(tmp_path: Path) -> None:
    uri = tmp_path / "changes"
    _interleaved_log(uri, 4)
    stale = DeltaTable(str(uri))
    plan = plan_compaction(stale, None, piece_rows=4)
    assert plan is not None
    rows = read_compaction_rows(stale, plan)
    first = DeltaTable(str(uri))
    first_plan = plan_compaction(first, None, piece_rows=4)
    assert first_plan is not None
    assert commit_compaction(first, first_plan, read_compaction_rows(first, first_plan),
                             target_size=None, metadata={})  # fmt: skip
    assert not commit_compaction(stale, plan, rows, target_size=None, metadata={})
    seqs = [r["seq"] for r in read_rows(uri)]
    assert seqs == list(range(1, 33))


def test_a_compaction_whose_pieces_miss_rows_commits_nothing(tmp_path: Path) -> None:
    """The pieces must add up to the rows counted in the snapshot; when they do not (a gap
    between pieces would lose rows), the write fails and the table is unchanged."""
    uri = tmp_path / "changes"
    _interleaved_log(uri, 4)
    table = DeltaTable(str(uri))
    version = table.version()
    plan = plan_compaction(table, None, piece_rows=4)
    assert plan is not None
    rows = read_compaction_rows(table, plan)
    assert isinstance(rows, CompactionRows)
    rows.num_rows += 1
    with pytest.raises(Exception, match="compaction read 32 rows in pieces, 33 counted"):
        commit_compaction(table, plan, rows, target_size=None, metadata={})
    assert DeltaTable(str(uri)).version() == version
    assert [r["seq"] for r in read_rows(uri)] == list(range(1, 33))
