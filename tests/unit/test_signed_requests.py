"""Requests to the lease holder in the lake: snapshot requests are signed like repair
requests, and a copy of a request already served (a replay) is never served again."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cdc_platform.backfill.repair import RepairKey, RepairResult, RepairTable
from cdc_platform.backfill.request_inbox import RepairInbox, SnapshotInbox
from cdc_platform.backfill.request_signing import signing_key
from cdc_platform.errors import SnapshotError
from cdc_platform.sink.lake_files import LakeFile

pytestmark = pytest.mark.unit

SNAPSHOT_KEY = signing_key("source-secret", "d", "snapshot")
REPAIR_KEY = signing_key("source-secret", "d", "repair")


def snapshot_inbox(root: Path, key: bytes | None = SNAPSHOT_KEY) -> SnapshotInbox:
    return SnapshotInbox(LakeFile(str(root)), key=key, allowed=lambda db, _t: db == "shop")


def rewrite(path: Path, **changes: object) -> None:
    item = json.loads(path.read_text())
    item.update(changes)
    path.write_text(json.dumps(item))


def test_a_signed_snapshot_request_is_served(tmp_path: Path) -> None:
    inbox = snapshot_inbox(tmp_path)
    request_id = inbox.submit(["shop.t"], requester="test")
    request = inbox.claim()
    assert request is not None
    assert (request.request_id, request.tables) == (request_id, ["shop.t"])


def test_hand_written_and_tampered_snapshot_requests_are_refused(tmp_path: Path) -> None:
    inbox = snapshot_inbox(tmp_path)
    requests = tmp_path / "requests"
    requests.mkdir()
    hand_written = "000000000000001-forged01"
    (requests / f"{hand_written}.json").write_text(
        json.dumps({"format": 1, "id": hand_written, "tables": ["shop.t"], "submitted_at": 1})
    )
    tampered = inbox.submit(["shop.t"])
    rewrite(requests / f"{tampered}.json", tables=["shop.big_table"])
    foreign = SnapshotInbox(LakeFile(str(tmp_path)), key=REPAIR_KEY).submit(["shop.t"])
    assert inbox.claim() is None
    answers = {rid: inbox.result(rid) for rid in (hand_written, tampered, foreign)}
    assert "not signed" in str(answers[hand_written])
    assert "wrong signature" in str(answers[tampered])
    assert "wrong signature" in str(answers[foreign]), "a repair key does not sign snapshots"
    assert not list(requests.iterdir())


def test_a_snapshot_request_needs_a_key(tmp_path: Path) -> None:
    with pytest.raises(SnapshotError, match="cannot sign"):
        snapshot_inbox(tmp_path, key=None).submit(["shop.t"])
    snapshot_inbox(tmp_path).submit(["shop.t"])
    assert snapshot_inbox(tmp_path, key=None).claim() is None  # refused: no key to verify


def test_a_replayed_snapshot_request_is_not_served_again(tmp_path: Path) -> None:
    inbox = snapshot_inbox(tmp_path)
    request_id = inbox.submit(["shop.t"])
    path = tmp_path / "requests" / f"{request_id}.json"
    captured = path.read_text()
    assert inbox.claim() is not None
    inbox.finish(request_id, rows={"shop.t": 5})
    path.write_text(captured)  # someone who saw the request writes it again
    assert inbox.pending()
    assert inbox.claim() is None
    assert not path.exists()
    answer = inbox.result(request_id)
    assert answer is not None
    assert answer.rows == {"shop.t": 5}


def test_a_replayed_repair_request_is_not_served_again(tmp_path: Path) -> None:
    inbox = RepairInbox(tmp_path, key=REPAIR_KEY)
    request_id = inbox.submit([RepairTable("shop", "t", [RepairKey([1], '{"id":1}')])])
    captured = (tmp_path / "requests" / f"{request_id}.json").read_text()
    assert inbox.claim() is not None
    inbox.finish(request_id, RepairResult(deletes={"shop.t": 1}, batches=[4], epoch=2))
    (tmp_path / "requests" / f"{request_id}.json").write_text(captured)
    assert inbox.claim() is None
    assert not (tmp_path / "claimed" / f"{request_id}.json").exists()
    result = inbox.wait(request_id, timeout=0)
    assert result is not None
    assert result.deletes == {"shop.t": 1}, "the first answer is kept"
