"""A compaction merged by a thread beside the stream, committed by the writer after later
appends, on real Delta tables in a temp directory. The merge is held at a gate so that the
appends in between are certain, not a matter of timing."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from cdc_platform.errors import SinkError
from cdc_platform.sink import DeltaChangeLog, MaintenancePolicy, compaction_beside
from cdc_platform.sink import delta as delta_module
from cdc_platform.sink.compaction import CompactedFile, compact
from cdc_platform.sink.compaction_plan import plan_compaction
from tests.integration.test_delta_sink import Binlog, read_rows, resume_of

pytestmark = pytest.mark.integration

POLICY = MaintenancePolicy(
    compact_every=3, vacuum_every=None, cleanup_every=None, reopen_every=None
)


class Gate:
    """Holds each merge thread until released; records what each merge wrote."""

    def __init__(self) -> None:
        self.open = threading.Event()
        self.written: list[list[CompactedFile]] = []

    def release(self) -> None:
        self.open.set()


@pytest.fixture
def gate(monkeypatch: pytest.MonkeyPatch) -> Iterator[Gate]:
    held = Gate()
    merge = compaction_beside.write_plan

    def gated(*args: Any, **kwargs: Any) -> list[CompactedFile]:
        assert held.open.wait(60), "the test never released the merge"
        files = merge(*args, **kwargs)
        held.written.append(files)
        return files

    monkeypatch.setattr(compaction_beside, "write_plan", gated)
    yield held
    held.release()


def _versions(uri: Path) -> dict[str, list[int]]:
    """Versions of the writer's batches and of the compactions, oldest first."""
    history = sorted(DeltaTable(str(uri)).history(), key=lambda h: int(h["version"]))
    return {
        "batches": [int(h["version"]) for h in history if "cdc.batch_seq" in h],
        "compactions": [
            int(h["version"]) for h in history if h.get("cdc.operation") == "compaction"
        ],
    }


def _compact_elsewhere(uri: Path) -> None:
    """Another process compacts the change log's small files (the same ones the writer's
    held merge planned)."""
    other = DeltaTable(str(uri))
    plan = plan_compaction(other, None)
    assert plan is not None
    assert compact(other, plan, storage_options=None, metadata={"cdc.operation": "compaction"})


def _commit(sink: DeltaChangeLog, binlog: Binlog, batch: int) -> None:
    events = binlog.rows(4, table="a")
    sink.commit(events, batch_seq=batch, resume=resume_of(events), epoch=1)


def test_the_stream_appends_while_a_compaction_merges_and_the_swap_lands_after(
    tmp_path: Path, gate: Gate
) -> None:
    uri = tmp_path / "changes"
    sink = DeltaChangeLog(str(uri), "d", maintenance=POLICY)
    binlog = Binlog()
    for batch in range(1, 6):  # planned after batch 3, held through batches 4 and 5
        _commit(sink, binlog, batch)
    assert _versions(uri)["compactions"] == []
    assert len(DeltaTable(str(uri)).file_uris()) == 5
    gate.release()
    _commit(sink, binlog, 6)  # the next compaction is due: the held one commits first
    versions = _versions(uri)
    assert versions["compactions"] == [versions["batches"][5] + 1]
    assert [r["seq"] for r in read_rows(uri)] == list(range(1, 25))
    # the first compaction merged batches 1-3; the second (planned at batch 6) the rest
    sink.close()
    versions = _versions(uri)
    assert len(versions["compactions"]) == 2
    assert len(DeltaTable(str(uri)).file_uris()) == 1
    assert [r["seq"] for r in read_rows(uri)] == list(range(1, 25))
    assert sink.recover() is not None


def test_a_side_writers_appends_meanwhile_do_not_stop_the_swap(tmp_path: Path, gate: Gate) -> None:
    """A snapshot or re-read commits chunks through another object of the same destination
    while the stream's merge runs: those commits add files and remove none, so the swap still
    lands, after both writers' appends, with every row once."""
    uri = tmp_path / "changes"
    sink = DeltaChangeLog(str(uri), "d", maintenance=POLICY)
    side = DeltaChangeLog(str(uri), "d", maintenance=MaintenancePolicy.disabled())
    binlog = Binlog()
    for batch in range(1, 4):
        _commit(sink, binlog, batch)
    _commit(side, binlog, 4)
    _commit(sink, binlog, 5)
    _commit(side, binlog, 6)
    gate.release()
    sink.close()
    versions = _versions(uri)
    assert versions["compactions"] == [max(versions["batches"]) + 1]
    assert [r["seq"] for r in read_rows(uri)] == list(range(1, 25))
    assert len(DeltaTable(str(uri)).file_uris()) == 4  # batches 1-3 merged, 4-6 as they were


def test_a_compaction_by_someone_else_meanwhile_drops_the_merged_files(
    tmp_path: Path, gate: Gate
) -> None:
    """Another process compacts the same files while the writer's merge is held: a commit
    since the plan removed files, so the writer's merge is never committed (that would keep
    every row twice) and its files are deleted."""
    uri = tmp_path / "changes"
    sink = DeltaChangeLog(str(uri), "d", maintenance=POLICY)
    binlog = Binlog()
    for batch in range(1, 4):
        _commit(sink, binlog, batch)
    _compact_elsewhere(uri)
    gate.release()
    _commit(sink, binlog, 4)
    sink.close()
    assert len(_versions(uri)["compactions"]) == 1, "only the other process's"
    assert [r["seq"] for r in read_rows(uri)] == list(range(1, 17))
    (mine,) = gate.written
    assert mine, "the writer merged files"
    assert not any(item.target.exists() for item in mine), "deleted"


def test_a_compaction_by_someone_else_after_the_last_append_drops_the_merged_files(
    tmp_path: Path, gate: Gate
) -> None:
    """The other compaction lands after the writer's last append, and the writer closes: the
    close reads the log up to its newest version, finds the files removed, commits nothing."""
    uri = tmp_path / "changes"
    sink = DeltaChangeLog(str(uri), "d", maintenance=POLICY)
    binlog = Binlog()
    for batch in range(1, 5):
        _commit(sink, binlog, batch)
    _compact_elsewhere(uri)
    gate.release()
    sink.close()
    assert len(_versions(uri)["compactions"]) == 1, "only the other process's"
    (mine,) = gate.written
    assert not any(item.target.exists() for item in mine), "deleted"
    assert [r["seq"] for r in read_rows(uri)] == list(range(1, 17))


def test_a_close_after_a_failed_commit_deletes_the_merged_files(
    tmp_path: Path, gate: Gate, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An append fails with a storage error while the merge is held (the writer drops its
    table object, which may be half-updated): the close has no version to commit the swap
    on, so it commits nothing and deletes the merged files; every row stays once."""
    uri = tmp_path / "changes"
    sink = DeltaChangeLog(str(uri), "d", maintenance=POLICY)
    binlog = Binlog()
    for batch in range(1, 4):
        _commit(sink, binlog, batch)
    real_write = delta_module.write_deltalake

    def unreachable(*args: Any, **kwargs: Any) -> None:
        raise OSError("the store did not answer")

    monkeypatch.setattr(delta_module, "write_deltalake", unreachable)
    with pytest.raises(SinkError, match="commit of batch 4 failed"):
        _commit(sink, binlog, 4)
    monkeypatch.setattr(delta_module, "write_deltalake", real_write)
    gate.release()
    sink.close()
    assert _versions(uri)["compactions"] == []
    (mine,) = gate.written
    assert mine, "the writer merged files"
    assert not any(item.target.exists() for item in mine), "deleted"
    assert len(DeltaTable(str(uri)).file_uris()) == 3
    assert [r["seq"] for r in read_rows(uri)] == list(range(1, 13))
