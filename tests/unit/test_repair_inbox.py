"""The repair inbox: claims, results, signatures and signs of life (no servers)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from cdc_platform.backfill.repair import RepairKey, RepairResult, RepairTable
from cdc_platform.backfill.request_inbox import RepairInbox
from cdc_platform.backfill.request_signing import signing_key
from cdc_platform.errors import ReconcileError
from cdc_platform.testing.processes import wait_for

pytestmark = pytest.mark.unit


KEY = signing_key("source-secret", "d")


def test_inbox_claim_is_exclusive_and_results_travel(tmp_path: Path) -> None:
    inbox = RepairInbox(tmp_path / "_reconcile", key=KEY)
    assert not inbox.pending()
    assert inbox.claim() is None
    tables = [
        RepairTable("db", "t", [RepairKey([1], '{"id":1}'), RepairKey([{"b64": "AA=="}], "x")])
    ]
    request_id = inbox.submit(tables)
    assert inbox.pending()
    other = RepairInbox(tmp_path / "_reconcile", key=KEY)
    claimed = inbox.claim()
    assert claimed is not None
    assert claimed.request_id == request_id
    assert claimed.tables == tables
    assert other.claim() is None  # only one claimer wins
    assert not inbox.withdraw(request_id)  # claimed: cannot be withdrawn any more
    inbox.finish(request_id, RepairResult(upserts={"db.t": 1}, batches=[7], epoch=3))
    result = inbox.wait(request_id, timeout=0)
    assert result is not None
    assert result.upserts == {"db.t": 1}
    assert result.batches == [7]
    assert result.epoch == 3


def test_inbox_unclaimed_request_is_withdrawn_and_errors_raise(tmp_path: Path) -> None:
    inbox = RepairInbox(tmp_path / "_reconcile", key=KEY)
    request_id = inbox.submit([RepairTable("db", "t", [RepairKey([1], '{"id":1}')])])
    assert inbox.wait(request_id, timeout=0, poll=0) is None
    assert not inbox.pending()
    second = inbox.submit([RepairTable("db", "t", [RepairKey([2], '{"id":2}')])])
    claimed = inbox.claim()
    assert claimed is not None
    inbox.finish(second, error="source unreachable")
    with pytest.raises(ReconcileError, match="source unreachable"):
        inbox.wait(second, timeout=0)


def test_inbox_refuses_unsigned_tampered_foreign_and_stale_requests(tmp_path: Path) -> None:
    root = tmp_path / "_reconcile"
    now = [1_000_000.0]
    allowed = {("db", "t")}
    holder = RepairInbox(
        root, key=KEY, allowed=lambda db, t: (db, t) in allowed, wall_clock=lambda: now[0]
    )
    table = [RepairTable("db", "t", [RepairKey([1], '{"id":1}')])]
    assert signing_key("", "d") is None
    with pytest.raises(ReconcileError, match="cannot sign"):
        RepairInbox(root).submit(table)

    def refused(request_id: str, why: str) -> None:
        assert holder.claim() is None
        with pytest.raises(ReconcileError, match=f"refused: .*{why}"):
            holder.wait(request_id, timeout=0)

    other_key = RepairInbox(
        root, key=signing_key("source-secret", "other"), wall_clock=lambda: now[0]
    )
    refused(other_key.submit(table), "wrong signature")
    requester = RepairInbox(root, key=KEY, wall_clock=lambda: now[0])
    tampered = requester.submit(table)
    path = root / "requests" / f"{tampered}.json"
    item = json.loads(path.read_text())
    item["tables"][0]["table"] = "u"
    path.write_text(json.dumps(item))
    refused(tampered, "wrong signature")
    unsigned = requester.submit(table)
    path = root / "requests" / f"{unsigned}.json"
    item = json.loads(path.read_text())
    del item["signature"]
    path.write_text(json.dumps(item))
    refused(unsigned, "not signed")
    (root / "requests" / "junk.json").write_text("{not json")
    refused("junk", "JSONDecodeError")
    foreign = requester.submit([RepairTable("mysql", "user", [RepairKey([1], '{"id":1}')])])
    refused(foreign, "outside the destination's filters")
    stale = requester.submit(table)
    now[0] += 2 * 24 * 3600
    refused(stale, "outside the accepted age")
    fresh = requester.submit(table)
    claimed = holder.claim()
    assert claimed is not None
    assert (claimed.request_id, claimed.tables) == (fresh, table)


def test_inbox_wait_ends_when_a_claimed_request_shows_no_sign_of_life(tmp_path: Path) -> None:
    now = [0.0]

    def sleep(seconds: float) -> None:
        now[0] += seconds

    requester = RepairInbox(tmp_path / "_reconcile", key=KEY, clock=lambda: now[0], sleep=sleep)
    holder = RepairInbox(tmp_path / "_reconcile", key=KEY)
    request_id = requester.submit([RepairTable("db", "t", [RepairKey([1], '{"id":1}')])])
    assert holder.claim() is not None  # ... and the holder dies
    with pytest.raises(ReconcileError, match="no sign of life for 60 s"):
        requester.wait(request_id, timeout=5, poll=1)
    assert 60 <= now[0] <= 62, "it waited past the claim deadline, as long as stale_after"

    gone = requester.submit([RepairTable("db", "t", [RepairKey([1], '{"id":1}')])])
    assert holder.claim() is not None
    (tmp_path / "_reconcile" / "claimed" / f"{gone}.json").unlink()  # removed by hand
    with pytest.raises(ReconcileError, match="without a result"):
        requester.wait(gone, timeout=5, poll=1)


def test_inbox_keep_alive_touches_the_claim(tmp_path: Path) -> None:
    inbox = RepairInbox(tmp_path / "_reconcile", key=KEY)
    request_id = inbox.submit([RepairTable("db", "t", [RepairKey([1], '{"id":1}')])])
    assert inbox.claim() is not None
    path = tmp_path / "_reconcile" / "claimed" / f"{request_id}.json"
    os.utime(path, (1.0, 1.0))
    with inbox.keep_alive(request_id, interval=0.01):
        wait_for(
            lambda: path.stat().st_mtime != 1.0, "the keep-alive to touch the claim", interval=0.01
        )
    assert path.stat().st_mtime != 1.0
