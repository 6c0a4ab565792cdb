"""Maintenance on S3 (a private SeaweedFS) never races a commit or a reader into a wrong result.

A long stream is committed with every maintenance task on a short cadence (compaction,
checkpoints, vacuum, log cleanup, reopen) while a reader loads the change log again and again.
Every read must be a whole prefix of the log (seq 1..n, no gap, no duplicate, never shorter
than an earlier read), and the log must replay exactly once at the end.
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest
from deltalake import DeltaTable
from deltalake.transaction import CommitProperties

from cdc_platform.config.lake import LakeLocation
from cdc_platform.events import ResumePosition
from cdc_platform.sink import DeltaChangeLog, MaintenancePolicy
from cdc_platform.sink.compaction import commit_compaction, compact, write_compaction
from cdc_platform.sink.compaction_plan import plan_compaction
from cdc_platform.sink.lake_files import LakeFile
from cdc_platform.sink.maintenance import TableMaintenance
from cdc_platform.sink.storage_errors import Redactor, StorageGuard
from cdc_platform.testing.replay import replay
from tests.conftest import S3Lake
from tests.integration.test_delta_sink import Binlog, resume_of

pytestmark = pytest.mark.integration

BATCHES = 60
"""Commits of one stream: every task of :data:`AGGRESSIVE` runs 8-20 times in it."""
ROWS = 10


@dataclass
class Reader:
    """Reads the change log in a loop; keeps every wrong result and every failed read."""

    uri: str
    reads: int = 0
    longest: int = 0
    wrong: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                table = DeltaTable(self.uri).to_pyarrow_table(columns=["seq"])
            except Exception as exc:  # a failed read is counted, never a wrong one
                self.failures.append(f"{type(exc).__name__}: {exc}"[-200:])
                continue
            seqs = sorted(int(s) for s in table.column("seq").to_pylist())
            self.reads += 1
            if seqs != list(range(1, len(seqs) + 1)):
                self.wrong.append(f"read {self.reads}: not a prefix: {len(seqs)} rows")
            elif len(seqs) < self.longest:
                self.wrong.append(f"read {self.reads}: {len(seqs)} rows after {self.longest}")
            self.longest = max(self.longest, len(seqs))


@dataclass
class Maintainer:
    """A separate process's scheduled maintenance of the same table (an operator's OPTIMIZE,
    checkpoint, log cleanup and vacuum), in a loop; keeps how often each landed or failed."""

    uri: str
    rounds: int = 0
    failures: list[str] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                table = DeltaTable(self.uri)
                table.optimize.compact(target_size=64 * 1024)
                table.create_checkpoint()
                table.cleanup_metadata()
                table.vacuum(dry_run=False, full=True)
                self.rounds += 1
            except Exception as exc:  # a conflict with the writer is allowed, not a wrong result
                self.failures.append(f"{type(exc).__name__}: {exc}"[-200:])


def stream(
    lake: LakeLocation,
    policy: MaintenancePolicy,
    table: str,
    *,
    maintainer: bool = False,
    batches: int = BATCHES,
) -> tuple[str, Reader]:
    """Commit ``batches`` batches with ``policy`` while a reader reads (and, if ``maintainer``,
    another process maintains the table); the uri and the reader."""
    uri = lake.join(table, "changes")
    sink = DeltaChangeLog(uri, "maint", storage_options=lake.delta_options(), maintenance=policy)
    binlog = Binlog()
    first = binlog.rows(ROWS)
    sink.commit(first, batch_seq=1, resume=resume_of(first), epoch=1)
    reader, other = Reader(uri), Maintainer(uri)
    threads = [threading.Thread(target=reader.run, name="reader", daemon=True)]
    if maintainer:
        threads.append(threading.Thread(target=other.run, name="maintainer", daemon=True))
    for thread in threads:
        thread.start()
    last = ResumePosition("x", 0)
    try:
        for batch in range(2, batches + 1):
            events = binlog.rows(ROWS, table=f"t{batch % 3}")
            last = resume_of(events)
            sink.commit(events, batch_seq=batch, resume=last, epoch=1)
    finally:
        reader.stop.set()
        other.stop.set()
        for thread in threads:
            thread.join(timeout=120)
    if maintainer:
        print(f"maintainer: {other.rounds} rounds, {len(other.failures)} failed")
        assert other.rounds > 0, other.failures[:3]
    checkpoint = DeltaChangeLog(uri, "maint", storage_options=lake.delta_options()).recover()
    assert checkpoint is not None
    assert (checkpoint.batch_seq, checkpoint.last_seq, checkpoint.resume) == (
        batches,
        batches * ROWS,
        last,
    )
    assert DeltaTable(uri).to_pyarrow_table(columns=["seq"]).num_rows == batches * ROWS
    result = replay(uri)
    assert result.rows == batches * ROWS
    assert not result.duplicates
    assert not result.seq_gaps
    assert not result.problems
    assert reader.reads > 0
    assert reader.wrong == [], reader.wrong[:5]
    return uri, reader


AGGRESSIVE = MaintenancePolicy(
    compact_every=3,
    compact_target_size=64 * 1024,
    checkpoint_every=4,
    checkpoint_interval=5,
    vacuum_every=5,
    cleanup_every=5,
    reopen_every=7,
)
"""Every task due every few commits; the retentions are the defaults."""


def test_aggressive_maintenance_on_s3_keeps_every_read_and_the_replay_exact(
    s3_lake: S3Lake, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The default retentions (deleted files 1 hour, log 15 minutes) protect a reader's snapshot
    from vacuum and log cleanup: no read fails, even with every task due every few commits."""
    lake = LakeLocation.resolve(s3_lake.uri, tmp_path, environ=os.environ)
    caplog.set_level(logging.DEBUG, logger="cdc_platform.sink")
    uri, reader = stream(lake, AGGRESSIVE, "kept")
    assert not [r for r in caplog.records if "failed" in r.getMessage()], caplog.text
    assert reader.failures == [], reader.failures[:5]
    ran = {
        r.getMessage().split(": ", 1)[1].split(" took")[0]
        for r in caplog.records
        if " took " in r.getMessage()
    }
    assert ran >= {"compaction", "checkpoint", "vacuum", "log cleanup", "reopen"}, ran
    assert any(h.get("cdc.operation") == "compaction" for h in DeltaTable(uri).history())
    keys = s3_lake.keys()
    log_files = [k for k in keys if "/kept/changes/_delta_log/" in k]
    assert any(k.endswith(".checkpoint.parquet") for k in log_files)
    assert not list(tmp_path.iterdir()), "nothing local"


def test_vacuum_without_retention_on_s3_can_fail_a_reader_but_never_misleads_it(
    s3_lake: S3Lake, tmp_path: Path
) -> None:
    """Retentions of 0 (not the default) let vacuum and log cleanup delete files and
    checkpoints a reader is still loading: such a read fails (a retry reads the new snapshot);
    it never returns a wrong result."""
    lake = LakeLocation.resolve(s3_lake.uri, tmp_path, environ=os.environ)
    policy = replace(
        AGGRESSIVE,
        vacuum_retention_hours=0,
        vacuum_enforce_retention_duration=False,
        deleted_file_retention="interval 0 seconds",
        log_retention="interval 0 seconds",
    )
    uri, reader = stream(lake, policy, "zero")
    print(f"{reader.reads} reads, {len(reader.failures)} failed: {reader.failures[:2]}")
    objects = s3_lake.keys()
    data = [k for k in objects if "/zero/changes/" in k and "_delta_log" not in k]
    assert len(data) <= len(DeltaTable(uri).file_uris()) + 3, "vacuumed down to the live files"
    log_files = [k for k in objects if "/zero/changes/_delta_log/" in k]
    assert not any(k.endswith("/00000000000000000000.json") for k in log_files), "log cleanup"


def test_another_process_maintaining_the_table_on_s3_never_breaks_a_commit_or_a_read(
    s3_lake: S3Lake, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An operator's scheduled OPTIMIZE, checkpoint, log cleanup and full vacuum racing the
    writer's commits (its own compaction off, see the next test): a commit that loses a version
    to them is re-checked and retried, so every batch lands once, and every read stays a whole
    prefix."""
    lake = LakeLocation.resolve(s3_lake.uri, tmp_path, environ=os.environ)
    caplog.set_level(logging.INFO, logger="cdc_platform.sink")
    _, reader = stream(  # twice as long: the race with the other process must happen
        lake, replace(AGGRESSIVE, compact_every=None), "shared", maintainer=True, batches=120
    )
    assert reader.failures == [], reader.failures[:5]
    assert any("lost a commit race" in r.getMessage() for r in caplog.records)


def test_delta_rs_optimize_would_keep_rows_twice_so_the_sink_does_not_use_it(
    s3_lake: S3Lake, tmp_path: Path
) -> None:
    """Why the sink has its own compaction: delta-rs 1.6's ``optimize.compact`` planned on an
    older snapshot still commits after another compaction of the same files (removes of
    ``dataChange=false`` files are not a conflict, even with ``max_commit_retries=0``), so every
    row they rewrote is kept twice. If a delta-rs upgrade refuses it, this test fails: then the
    sink could go back to the library's compaction (and docs/ha.md can say so)."""
    lake = LakeLocation.resolve(s3_lake.uri, tmp_path, environ=os.environ)
    uri = lake.join("stale", "changes")
    binlog = Binlog()
    sink = DeltaChangeLog(uri, "maint", storage_options=lake.delta_options())
    for batch in range(1, 6):
        events = binlog.rows(ROWS)
        sink.commit(events, batch_seq=batch, resume=resume_of(events), epoch=1)
    options = lake.delta_options()
    stale = DeltaTable(uri, storage_options=options)  # planned before the other compaction
    DeltaTable(uri, storage_options=options).optimize.compact()
    stale.optimize.compact(commit_properties=CommitProperties(max_commit_retries=0))
    seqs = DeltaTable(uri, storage_options=options).to_pyarrow_table(columns=["seq"])
    assert seqs.num_rows == 2 * 5 * ROWS


def test_a_stale_compaction_after_another_is_refused_and_keeps_rows_once(
    s3_lake: S3Lake, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The hazard above with the sink's own compaction: an old holder paused between planning
    its compaction (merged files written) and committing it, while its successor compacted the
    same files and committed a batch. Its commit is refused, the log keeps every row once, and
    its merged file is deleted from the bucket (no commit refers to it)."""
    lake = LakeLocation.resolve(s3_lake.uri, tmp_path, environ=os.environ)
    uri = lake.join("stale", "changes")
    options = lake.delta_options()
    binlog = Binlog()
    sink = DeltaChangeLog(uri, "maint", storage_options=options)
    for batch in range(1, 6):
        events = binlog.rows(ROWS, table=f"t{batch % 2}")
        sink.commit(events, batch_seq=batch, resume=resume_of(events), epoch=1)
    stale = DeltaTable(uri, storage_options=options)
    plan = plan_compaction(stale, None)
    assert plan is not None
    assert plan.files == 5
    written = write_compaction(stale, plan, storage_options=options)
    assert sum(item.rows for item in written) == 5 * ROWS
    assert all(item.target.exists() for item in written)
    # the successor: its own compaction (by the sink's policy) and a batch
    policy = replace(AGGRESSIVE, compact_every=1, checkpoint_every=None, vacuum_every=None)
    successor = DeltaChangeLog(uri, "maint", storage_options=options, maintenance=policy)
    events = binlog.rows(ROWS, table="t0")
    successor.commit(events, batch_seq=6, resume=resume_of(events), epoch=2)
    successor.close()  # commits the compaction merged beside its stream
    history = DeltaTable(uri, storage_options=options).history()
    assert any(h.get("cdc.operation") == "compaction" for h in history)
    assert not commit_compaction(stale, plan, written, storage_options=options, metadata={})
    assert not any(item.target.exists() for item in written)
    table = DeltaTable(uri, storage_options=options)
    seqs = sorted(table.to_pyarrow_table(columns=["seq"]).column("seq").to_pylist())
    assert seqs == list(range(1, 6 * ROWS + 1))
    result = replay(uri)
    assert (result.rows, result.duplicates, result.seq_gaps) == (6 * ROWS, [], [])


def test_compaction_is_skipped_once_someone_else_committed(
    s3_lake: S3Lake, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A holder that resumes after a takeover (its successor has committed since its own
    commit) does not compact: its compaction could otherwise land beside the successor's."""
    lake = LakeLocation.resolve(s3_lake.uri, tmp_path, environ=os.environ)
    uri = lake.join("skip", "changes")
    binlog = Binlog()
    old = DeltaChangeLog(uri, "maint", storage_options=lake.delta_options())
    for batch in range(1, 4):
        events = binlog.rows(ROWS)
        old.commit(events, batch_seq=batch, resume=resume_of(events), epoch=1)
    stale = DeltaTable(uri)  # the old holder's table after its last commit
    new = DeltaChangeLog(uri, "maint", storage_options=lake.delta_options())
    events = binlog.rows(ROWS)
    new.commit(events, batch_seq=4, resume=resume_of(events), epoch=2)
    policy = replace(AGGRESSIVE, compact_every=1, checkpoint_every=None, vacuum_every=None)
    guard = StorageGuard("maint", Redactor(uri, lake.delta_options()))
    caplog.set_level(logging.INFO, logger="cdc_platform.sink")
    TableMaintenance(policy, guard, lambda: DeltaTable(uri)).after_commit(stale, 1)
    assert "compaction of" in caplog.text
    assert "skipped" in caplog.text
    assert all(h.get("cdc.operation") != "compaction" for h in DeltaTable(uri).history())
    # With nobody else committing since, the same call compacts (merged beside the stream,
    # committed at the latest when the writer closes).
    maintenance = TableMaintenance(policy, guard, lambda: DeltaTable(uri))
    fresh = DeltaTable(uri)
    maintenance.after_commit(fresh, 1)
    maintenance.close(fresh)
    assert any(h.get("cdc.operation") == "compaction" for h in DeltaTable(uri).history())
    assert DeltaTable(uri).to_pyarrow_table(columns=["seq"]).num_rows == 4 * ROWS


def test_a_compaction_on_s3_keeps_every_row_byte_for_byte(s3_lake: S3Lake, tmp_path: Path) -> None:
    """Partitions with quotes, spaces and non-ASCII names on S3: the merged files hold the same
    rows, row for row, each once, and the small files leave the snapshot."""
    lake = LakeLocation.resolve(s3_lake.uri, tmp_path, environ=os.environ)
    uri = lake.join("merge", "changes")
    options = lake.delta_options()
    sink = DeltaChangeLog(uri, "maint", storage_options=options)
    binlog = Binlog()
    names = [("shop", "orders"), ("we'ird", "ta ble"), ("ünï", "pct%_x")]
    for batch in range(1, 10):
        db, name = names[batch % 3]
        events = binlog.rows(ROWS, db=db, table=name)
        sink.commit(events, batch_seq=batch, resume=resume_of(events), epoch=1)
    before = DeltaTable(uri, storage_options=options)
    rows = before.to_pyarrow_table().sort_by("seq")
    plan = plan_compaction(before, None)
    assert plan is not None
    assert (len(plan.groups), plan.files) == (3, 9)
    assert compact(before, plan, storage_options=options, metadata={"cdc.operation": "compaction"})
    after = DeltaTable(uri, storage_options=options)
    assert len(after.file_uris()) == 3
    assert after.to_pyarrow_table().sort_by("seq").equals(rows)
    root = LakeFile(after.table_uri, options)
    for path in after.file_uris():
        assert root.child(path.removeprefix(after.table_uri.rstrip("/") + "/")).exists(), path
    result = replay(uri)
    assert (result.rows, result.duplicates, result.seq_gaps) == (9 * ROWS, [], [])
