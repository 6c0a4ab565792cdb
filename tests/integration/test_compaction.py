"""The change log's own compaction (a fenced rewrite) on real Delta tables in a temp directory.

The S3 variants, including a stale compaction refused after a successor's, are in
``test_s3_maintenance.py``.
"""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from cdc_platform.errors import SinkError
from cdc_platform.sink import DeltaChangeLog, MaintenancePolicy
from cdc_platform.sink.compaction import (
    CompactedFile,
    _landed,
    commit_compaction,
    compact,
    write_compaction,
)
from cdc_platform.sink.compaction_plan import CompactionPlan, plan_compaction
from cdc_platform.sink.lake_files import LakeFile
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
    sink.close()  # commits the compaction still being merged beside the stream
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


def _log(uri: Path, batches: int, tables: tuple[str, ...] = ("a",), rows: int = 3) -> None:
    """``batches`` commits of ``rows`` rows of each of ``tables`` (so with two tables each
    partition's seq numbers have gaps)."""
    sink = DeltaChangeLog(str(uri), "d", maintenance=MaintenancePolicy.disabled())
    binlog = Binlog()
    for batch in range(1, batches + 1):
        events = [e for name in tables for e in binlog.rows(rows, table=name)]
        sink.commit(events, batch_seq=batch, resume=resume_of(events), epoch=1)


def _write(table: DeltaTable, plan: CompactionPlan, **kwargs: int) -> list[CompactedFile]:
    return write_compaction(table, plan, storage_options=None, **kwargs)


def _commit(table: DeltaTable, plan: CompactionPlan, written: list[CompactedFile]) -> bool:
    return commit_compaction(table, plan, written, storage_options=None, metadata={})


def _data_files(uri: Path) -> set[str]:
    """Every Parquet file in the table's folders, committed or not."""
    return {str(p.relative_to(uri)) for p in uri.rglob("*.parquet") if "_delta_log" not in p.parts}


def test_a_compaction_planned_before_any_commit_is_refused_and_leaves_no_file(
    tmp_path: Path,
) -> None:
    """A plan from an older snapshot never commits: not after a batch (which the rewrite would
    otherwise erase) and not after another compaction (which it would otherwise duplicate).
    The file it wrote is deleted: it was in no commit."""
    uri = tmp_path / "changes"
    _log(uri, 4, rows=2)
    before = _data_files(uri)
    stale = DeltaTable(str(uri))
    plan = plan_compaction(stale, None)
    assert plan is not None
    written = _write(stale, plan)
    assert _data_files(uri) == before | {unquote(w.path) for w in written}
    _log_more(uri, batch=5)
    assert not _commit(stale, plan, written)
    assert [r["seq"] for r in read_rows(uri)] == list(range(1, 11))
    assert len(_data_files(uri) - before) == 1  # batch 5's file; the merged one is deleted
    assert not any((uri / unquote(w.path)).exists() for w in written)

    # a fresh plan commits; a plan made before it does not
    first, second = DeltaTable(str(uri)), DeltaTable(str(uri))
    plans = [plan_compaction(t, None) for t in (first, second)]
    assert plans[0] is not None
    assert plans[1] is not None
    files = [_write(t, p) for t, p in zip((first, second), plans, strict=True)]
    assert _commit(first, plans[0], files[0])
    assert not _commit(second, plans[1], files[1])
    assert [r["seq"] for r in read_rows(uri)] == list(range(1, 11))
    assert len(DeltaTable(str(uri)).file_uris()) == 1
    assert not (uri / unquote(files[1][0].path)).exists()
    assert (uri / unquote(files[0][0].path)).exists()


def _log_more(uri: Path, batch: int) -> None:
    sink = DeltaChangeLog(str(uri), "d", maintenance=MaintenancePolicy.disabled())
    binlog = Binlog(pos=10_000, seq_no=1000)
    events = binlog.rows(2, table="a")
    sink.commit(events, batch_seq=batch, resume=resume_of(events), epoch=1)


def test_a_compaction_in_small_pieces_keeps_every_row_once_with_its_statistics(
    tmp_path: Path,
) -> None:
    """Pieces of 4 rows, row groups of a few: each partition's files become one file holding
    the same rows, row for row, whose statistics let a reader skip it by seq."""
    uri = tmp_path / "changes"
    _log(uri, 6, tables=("a", "b"), rows=5)
    before = read_rows(uri)
    table = DeltaTable(str(uri))
    plan = plan_compaction(table, None)
    assert plan is not None
    assert [len(g.files) for g in plan.groups] == [6, 6]
    assert compact(table, plan, storage_options=None, metadata={"k": 1}, piece_rows=4)
    assert read_rows(uri) == before
    after = DeltaTable(str(uri))
    assert len(after.file_uris()) == 2
    (last,) = after.history(1)
    assert (last["cdc.compaction.rows"], last["cdc.compaction.files"], last["k"]) == (
        "60",
        "12",
        "1",
    )
    actions = pa.table(after.get_add_actions(flatten=True)).to_pylist()
    a_seqs = [r["seq"] for r in before if r["table"] == "a"]
    (a_file,) = [x for x in actions if x["partition.table"] == "a"]
    assert (a_file["min.seq"], a_file["max.seq"], a_file["num_records"]) == (
        min(a_seqs),
        max(a_seqs),
        30,
    )
    assert a_file["null_count.seq"] == 0
    # file skipping by seq: a filter past a file's max seq leaves it out
    fragments = after.to_pyarrow_dataset().get_fragments
    assert len(list(fragments(filter=pc.field("seq") > max(a_seqs)))) == 1  # b's file only
    assert len(list(fragments(filter=pc.field("seq") > 60))) == 0
    # row groups of the pieces' size at most, the JSON column list dictionary-encoded
    parquet = pq.ParquetFile(after.file_uris()[0])
    assert parquet.metadata.num_row_groups >= 1
    assert pa.types.is_dictionary(parquet.schema_arrow.field("columns").type)


def test_a_file_that_does_not_hold_its_add_actions_rows_is_not_compacted(
    tmp_path: Path,
) -> None:
    """The rows read must add up to the add actions' counts; when they do not, nothing is
    committed and the files written are deleted."""
    uri = tmp_path / "changes"
    _log(uri, 4)
    before = _data_files(uri)
    table = DeltaTable(str(uri))
    version = table.version()
    plan = plan_compaction(table, None)
    assert plan is not None
    (group,) = plan.groups
    lying = replace(group.files[1], rows=group.files[1].rows + 1)
    bad = replace(plan, groups=(replace(group, files=(group.files[0], lying, *group.files[2:])),))
    with pytest.raises(SinkError, match="holds 3 rows, its add action says 4"):
        compact(table, bad, storage_options=None, metadata={})
    assert DeltaTable(str(uri)).version() == version
    assert [r["seq"] for r in read_rows(uri)] == list(range(1, 13))
    assert _data_files(uri) == before


KILLED_COMPACTION = """
import sys, time
from deltalake import DeltaTable
from cdc_platform.sink.compaction import commit_compaction, write_compaction
from cdc_platform.sink.compaction_plan import plan_compaction
table = DeltaTable(sys.argv[1])
plan = plan_compaction(table, None)
written = write_compaction(table, plan, storage_options=None)
print("written", flush=True)
time.sleep(600)
commit_compaction(table, plan, written, storage_options=None, metadata={})
"""


def test_a_compaction_killed_before_its_commit_leaves_the_log_readable_and_exact(
    tmp_path: Path,
) -> None:
    """kill -9 after the merged file is in the table's folder, before the commit: the log
    reads the same rows once, the file is an orphan (vacuum's), and the next compaction
    merges the same files."""
    uri = tmp_path / "changes"
    _log(uri, 5, tables=("a", "b"))
    before = read_rows(uri)
    files = _data_files(uri)
    child = subprocess.Popen(
        [sys.executable, "-c", KILLED_COMPACTION, str(uri)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "written"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    orphans = _data_files(uri) - files
    assert len(orphans) == 2  # one merged file per partition, in no commit
    assert read_rows(uri) == before
    table = DeltaTable(str(uri))
    assert len(table.file_uris()) == 10
    plan = plan_compaction(table, None)
    assert plan is not None
    assert compact(table, plan, storage_options=None, metadata={})
    assert read_rows(uri) == before
    assert len(DeltaTable(str(uri)).file_uris()) == 2


def test_a_lost_answer_is_told_apart_from_a_lost_race(tmp_path: Path) -> None:
    """After ``CommitFailedError`` the compaction reads the commit of the version it tried: its
    own (the commit landed, its answer was lost: the file must stay) or someone else's (the
    file is deleted)."""
    uri = tmp_path / "changes"
    _log(uri, 4)
    stale = DeltaTable(str(uri))
    plan = plan_compaction(stale, None)
    assert plan is not None
    written = _write(stale, plan)
    root = LakeFile(stale.table_uri)
    _log_more(uri, batch=5)  # someone else's commit at plan.version + 1
    assert _landed(root, plan.version, written) is False
    table = DeltaTable(str(uri))
    fresh = plan_compaction(table, None)
    assert fresh is not None
    mine = _write(table, fresh)
    assert _commit(table, fresh, mine)
    assert _landed(root, fresh.version, mine) is True
    assert _landed(root, fresh.version + 5, mine) is None  # no such commit yet: cannot tell
