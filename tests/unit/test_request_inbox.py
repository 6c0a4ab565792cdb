"""The lease holder's one request inbox: both kinds through one claim, snapshot claims with
signs of life, taken over when their holder died, put back when it stopped (no servers)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from cdc_platform.backfill.repair import RepairKey, RepairTable
from cdc_platform.backfill.request_folder import STALE_AFTER_SECONDS
from cdc_platform.backfill.request_inbox import (
    HolderInbox,
    RepairInbox,
    RepairRequest,
    SnapshotInbox,
    SnapshotRequest,
)
from cdc_platform.backfill.request_signing import signing_key
from cdc_platform.errors import ReconcileError

pytestmark = pytest.mark.unit

SNAPSHOT_KEY = signing_key("source-secret", "d", "snapshot")
REPAIR_KEY = signing_key("source-secret", "d", "repair")
TABLES = [RepairTable("shop", "t", [RepairKey([1], '{"id":1}')])]


class FakeClock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def snapshots(root: Path, clock: FakeClock | None = None) -> SnapshotInbox:
    return SnapshotInbox(root / "_snapshot_requests", key=SNAPSHOT_KEY, clock=clock or FakeClock())


def repairs(root: Path, clock: FakeClock | None = None) -> RepairInbox:
    return RepairInbox(root / "_reconcile", key=REPAIR_KEY, clock=clock or FakeClock())


def test_a_snapshot_claim_is_exclusive(tmp_path: Path) -> None:
    """Two holders (an old one paused, a new one) do not both get the same request."""
    request_id = snapshots(tmp_path).submit(["shop.t"], requester="test")
    first, second = snapshots(tmp_path), snapshots(tmp_path)
    claimed = first.claim()
    assert claimed is not None
    assert claimed == SnapshotRequest(request_id, ["shop.t"], "test", claimed.submitted_at)
    assert second.claim() is None
    assert not second.pending()
    assert (tmp_path / "_snapshot_requests" / "claimed" / f"{request_id}.json").exists()


def test_a_snapshot_claimed_by_a_holder_that_died_is_served_after_its_claim_goes_stale(
    tmp_path: Path,
) -> None:
    request_id = snapshots(tmp_path).submit(["shop.t"])
    assert snapshots(tmp_path).claim() is not None  # ... and that holder dies
    clock = FakeClock()
    next_holder = snapshots(tmp_path, clock)
    assert not next_holder.pending()
    assert next_holder.claim() is None, "a claim with signs of life is left to its holder"
    clock.now += STALE_AFTER_SECONDS - 1
    assert not next_holder.pending()
    clock.now += 1
    assert next_holder.pending()
    taken = next_holder.claim()
    assert taken is not None
    assert (taken.request_id, taken.tables) == (request_id, ["shop.t"])
    next_holder.finish(request_id, rows={"shop.t": 3})
    answer = snapshots(tmp_path).result(request_id)
    assert answer is not None
    assert (answer.rows, answer.error) == ({"shop.t": 3}, None)
    assert not next_holder.pending()


def test_a_claim_that_shows_signs_of_life_is_not_taken_over(tmp_path: Path) -> None:
    request_id = snapshots(tmp_path).submit(["shop.t"])
    holder = snapshots(tmp_path)
    assert holder.claim() is not None
    clock = FakeClock()
    watcher = snapshots(tmp_path, clock)
    claimed = tmp_path / "_snapshot_requests" / "claimed" / f"{request_id}.json"
    for beat in range(1, 4):
        assert not watcher.pending()
        clock.now += STALE_AFTER_SECONDS - 1
        stamp = 1_000_000.0 + beat  # the holder's heartbeat (HEARTBEAT_SECONDS apart)
        os.utime(claimed, (stamp, stamp))
    assert watcher.claim() is None


def test_a_repair_claimed_by_a_holder_that_died_is_not_served_again(tmp_path: Path) -> None:
    """A repair's requester gives up on the same staleness and reruns the reconciliation."""
    repairs(tmp_path).submit(TABLES)
    assert repairs(tmp_path).claim() is not None
    clock = FakeClock()
    next_holder = repairs(tmp_path, clock)
    assert next_holder.claim() is None
    clock.now += 10 * STALE_AFTER_SECONDS
    assert not next_holder.pending()
    assert next_holder.claim() is None


def test_an_interrupted_snapshot_request_is_put_back(tmp_path: Path) -> None:
    request_id = snapshots(tmp_path).submit(["shop.t"])
    holder = snapshots(tmp_path)
    assert holder.claim() is not None
    holder.release(request_id)  # stopped after a chunk
    assert snapshots(tmp_path).result(request_id) is None
    again = snapshots(tmp_path).claim()
    assert again is not None
    assert again.request_id == request_id


def test_the_holder_serves_one_inbox_oldest_first_by_kind(tmp_path: Path) -> None:
    wall = [time.time()]
    snapshot_requester = SnapshotInbox(
        tmp_path / "_snapshot_requests", key=SNAPSHOT_KEY, wall_clock=lambda: wall[0]
    )
    repair_requester = RepairInbox(
        tmp_path / "_reconcile", key=REPAIR_KEY, wall_clock=lambda: wall[0]
    )
    first = snapshot_requester.submit(["shop.t"])
    wall[0] += 1
    second = repair_requester.submit(TABLES)
    wall[0] += 1
    third = snapshot_requester.submit(["shop.u"])
    holder = HolderInbox(repairs(tmp_path), snapshots(tmp_path))
    assert holder.pending()
    served: list[tuple[str, str]] = []
    while (request := holder.claim()) is not None:
        kind = "repair" if isinstance(request, RepairRequest) else "snapshot"
        served.append((kind, request.request_id))
    assert served == [("snapshot", first), ("repair", second), ("snapshot", third)]
    assert not holder.pending()


def test_the_one_inbox_refuses_forged_requests_of_either_kind(tmp_path: Path) -> None:
    """Signed with the other kind's key, or tampered with: answered with the refusal, never
    handed to the holder."""
    foreign = SnapshotInbox(tmp_path / "_snapshot_requests", key=REPAIR_KEY).submit(["shop.t"])
    tampered = repairs(tmp_path).submit(TABLES)
    path = tmp_path / "_reconcile" / "requests" / f"{tampered}.json"
    item = json.loads(path.read_text())
    item["tables"][0]["table"] = "users"
    path.write_text(json.dumps(item))
    holder = HolderInbox(repairs(tmp_path), snapshots(tmp_path))
    assert holder.claim() is None
    answer = snapshots(tmp_path).result(foreign)
    assert answer is not None
    assert "wrong signature" in str(answer.error)
    with pytest.raises(ReconcileError, match="wrong signature"):
        repairs(tmp_path).wait(tampered, timeout=0)
    assert not holder.pending()
