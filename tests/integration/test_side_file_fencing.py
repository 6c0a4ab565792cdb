"""The lake's side files are fenced: a paused old holder never replaces what a newer term
wrote, on a real S3-compatible server (SeaweedFS) and on a local disk alike.

Each holder has its own handles (nothing shared but the store); "paused" means the old holder
read the file, then the new holder read and wrote it, and only then the old one writes.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from cdc_platform.backfill.new_tables import CapturedTables
from cdc_platform.backfill.reread import RereadRecord
from cdc_platform.config.start import StartConfig
from cdc_platform.errors import StaleSideFileError
from cdc_platform.sink.lake_files import LakeFile
from cdc_platform.sink.start_record import StartRecord
from cdc_platform.testing.seaweedfs import SeaweedFSServer

pytestmark = pytest.mark.integration


@pytest.fixture(params=["local", "s3"])
def lake(
    request: pytest.FixtureRequest, tmp_path: Path, seaweedfs: SeaweedFSServer
) -> Iterator[LakeFile]:
    """A fresh lake folder on the local disk or in the suite's SeaweedFS bucket."""
    if request.param == "local":
        yield LakeFile(str(tmp_path / "lake"))
        return
    if not seaweedfs.running:
        seaweedfs.start()
    root = LakeFile(f"s3://{seaweedfs.bucket}/fencing-{tmp_path.name}", seaweedfs.environment())
    yield root
    root.delete_tree()


def _handle(lake: LakeFile, name: str) -> LakeFile:
    """A holder's own handle on ``name`` (a new object, as another process would have)."""
    return LakeFile(lake.child("d", name).uri, lake.storage_options)


def test_a_paused_holder_cannot_replace_a_newer_terms_file(lake: LakeFile) -> None:
    _handle(lake, "_snapshot_state.json").write_json({"term": 1, "chunks": 3})
    old = _handle(lake, "_snapshot_state.json")
    assert old.read_json() == {"term": 1, "chunks": 3}  # then the old holder pauses
    new = _handle(lake, "_snapshot_state.json")
    assert new.read_json() == {"term": 1, "chunks": 3}
    new.write_json({"term": 2, "chunks": 4})
    with pytest.raises(StaleSideFileError, match="fenced off"):
        old.write_json({"term": 1, "chunks": 4})
    with pytest.raises(StaleSideFileError):
        old.delete()
    assert _handle(lake, "_snapshot_state.json").read_json() == {"term": 2, "chunks": 4}
    new.write_json({"term": 2, "chunks": 5})  # the holder of the newer term goes on
    assert new.delete()


def test_a_holder_that_saw_no_file_cannot_replace_one_created_since(lake: LakeFile) -> None:
    old, new = _handle(lake, "_reread_tables.json"), _handle(lake, "_reread_tables.json")
    assert old.read_json() is None
    assert new.read_json() is None
    new.write_json({"tables": ["db.t"]})
    with pytest.raises(StaleSideFileError):
        old.write_json({"tables": []})
    assert _handle(lake, "_reread_tables.json").read_json() == {"tables": ["db.t"]}


def test_the_captured_tables_record_of_an_old_holder_is_refused(lake: LakeFile) -> None:
    """The record itself: both holders load it, the new one saves first."""
    old = CapturedTables.load(_handle(lake, "_captured_tables.json"))
    new = CapturedTables.load(_handle(lake, "_captured_tables.json"))
    new.done("db.b")
    with pytest.raises(StaleSideFileError):
        old.done("db.a")
    assert CapturedTables.load(_handle(lake, "_captured_tables.json")).tables == {"db.b"}


def test_the_start_record_of_an_older_epoch_is_refused(lake: LakeFile) -> None:
    """The start is written without reading first: the epoch in the record fences it."""
    StartRecord.write(_handle(lake, "_start.json"), StartConfig(mode="latest"), None, epoch=2)
    with pytest.raises(StaleSideFileError, match="epoch 2"):
        StartRecord.write(_handle(lake, "_start.json"), StartConfig(mode="initial"), None, epoch=1)
    record = StartRecord.load(_handle(lake, "_start.json"))
    assert record is not None
    assert record.start == StartConfig(mode="latest")
    StartRecord.write(_handle(lake, "_start.json"), StartConfig(mode="initial"), None, epoch=3)


def test_racing_read_modify_writes_lose_no_update(lake: LakeFile) -> None:
    """Holders racing on one file: every write that was not refused is in the result (an
    unfenced store loses updates: two writers read n and both write n + 1)."""
    RereadRecord(_handle(lake, "_reread_tables.json")).add(["db.t0"])
    landed: list[int] = []
    start = threading.Barrier(4)

    def holder(number: int) -> None:
        start.wait()
        for step in range(10):
            handle = _handle(lake, "_reread_tables.json")
            data = handle.read_json()
            data["tables"][f"db.h{number}-{step}"] = data["next"]
            data["next"] += 1
            try:
                handle.write_json(data)
            except StaleSideFileError:
                continue
            landed.append(1)

    threads = [threading.Thread(target=holder, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    tables = RereadRecord(_handle(lake, "_reread_tables.json")).load()
    assert landed, "some writes landed"
    assert len(tables) == 1 + len(landed)
