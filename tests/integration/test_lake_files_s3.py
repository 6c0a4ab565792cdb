"""The lake-file layer, the request inbox (repairs, snapshots) and a snapshot with the lake on a
real S3-compatible server (SeaweedFS ``weed mini``).

The suite's session SeaweedFS serves them; ``seaweed_s3_local`` hands its settings to the
lake-file layer as storage options (not through the environment).
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from cdc_platform.backfill.new_tables import snapshot_new_tables
from cdc_platform.backfill.repair import RepairKey, RepairResult, RepairTable
from cdc_platform.backfill.request_folder import STALE_AFTER_SECONDS
from cdc_platform.backfill.request_inbox import RepairInbox, SnapshotInbox
from cdc_platform.backfill.snapshot import (
    SnapshotProgress,
    SnapshotRunner,
)
from cdc_platform.config.instance import SnapshotSettings
from cdc_platform.errors import ReconcileError, SinkError
from cdc_platform.sink.destination_lake import DestinationLake
from cdc_platform.sink.lake_files import LakeFile
from cdc_platform.sink.term import WriteTerm
from cdc_platform.testing.destinations import PASSWORD_ENV, instance_config
from cdc_platform.testing.processes import wait_until
from cdc_platform.testing.seaweedfs import SeaweedFSServer
from tests.conftest import MariaDBDatabase

pytestmark = pytest.mark.integration

KEY = b"k" * 32


@pytest.fixture
def seaweed_s3_local(seaweedfs: SeaweedFSServer) -> dict[str, str]:
    """Storage options (the standard AWS keys) of the suite's private SeaweedFS."""
    if not seaweedfs.running:
        seaweedfs.start()
    return seaweedfs.environment()


def test_objects_round_trip_on_s3(seaweed_s3_local: dict[str, str]) -> None:
    root = LakeFile("s3://lake/prefix", seaweed_s3_local)
    folder = root.child("d", "requests")
    assert folder.list(".json") == []
    assert folder.child("a.json").read_json() is None
    folder.child("a.json").write_json({"n": 1})
    folder.child("b.json").write_json({"n": 2})
    assert folder.list(".json") == ["a.json", "b.json"]
    folder.child("a.json").write_json({"n": 3})
    assert folder.child("a.json").read_json() == {"n": 3}
    first = folder.child("a.json").modified()
    assert first is not None

    def renewed() -> bool:  # S3 times have one-second resolution: touch until it shows
        folder.child("a.json").touch()
        return (folder.child("a.json").modified() or 0.0) > first

    wait_until(renewed, timeout=30, what="a touch to renew the modification time")
    assert folder.child("a.json").read_json() == {"n": 3}
    assert folder.child("a.json").move_to(root.child("d", "claimed", "a.json"))
    assert not folder.child("a.json").move_to(root.child("d", "claimed", "a.json"))
    assert root.child("d", "claimed", "a.json").read_json() == {"n": 3}
    assert folder.child("b.json").delete()
    assert not folder.child("b.json").delete()
    staging = root.child("_cdc_staging", "x")
    staging.child("part-00000.parquet").write_parquet(pa.table({"n": [1, 2]}))
    assert root.child("_cdc_staging").folders() == ["x"]
    table = pq.read_table(pa.BufferReader(staging.child("part-00000.parquet").read_bytes()))
    assert table.column("n").to_pylist() == [1, 2]
    root.delete_tree()
    assert not root.child("d", "claimed", "a.json").exists()


def test_snapshot_state_lives_on_s3(seaweed_s3_local: dict[str, str]) -> None:
    state = DestinationLake.at("s3://lake/lake-root", "d", seaweed_s3_local).snapshot_state
    assert state.path == "lake/lake-root/d/_snapshot_state.json"
    state.write_json({"v": 1, "destination": "d"})
    again = DestinationLake.at(
        "s3://lake/lake-root/", "d", seaweed_s3_local
    ).snapshot_state  # another node
    assert again.read_json() == {"v": 1, "destination": "d"}
    assert again.delete()
    assert not state.exists()


def test_repair_inbox_on_s3(seaweed_s3_local: dict[str, str]) -> None:
    """Requester and holder share only the bucket: submit, claim, finish, wait; and the
    withdraw/claim protocol in both orders."""
    root = LakeFile("s3://lake/inbox-root/d/_reconcile", seaweed_s3_local)
    requester = RepairInbox(root, key=KEY)
    holder = RepairInbox(LakeFile(root.uri, seaweed_s3_local), key=KEY)
    tables = [RepairTable("db", "t", [RepairKey([1], '{"id":1}')])]
    request_id = requester.submit(tables)
    assert holder.pending()
    claimed = holder.claim()
    assert claimed is not None
    assert (claimed.request_id, claimed.tables) == (request_id, tables)
    assert holder.claim() is None
    assert not requester.withdraw(request_id)  # claimed: waited for, not given up
    holder.finish(request_id, RepairResult())
    assert requester.wait(request_id, 5) == RepairResult()
    assert not holder.claimed.list(".json")

    late = requester.submit(tables)
    assert requester.withdraw(late)  # withdrawn first: nothing left to claim
    assert holder.claim() is None
    assert not holder.results.list(".json")

    # a holder between its two steps (copied into claimed/, not yet removed from requests/):
    # the requester's withdraw sees the claim and keeps waiting for it
    midway = requester.submit(tables)
    name = f"{midway}.json"
    assert holder.requests.child(name).copy_to(holder.claimed.child(name))
    assert not requester.withdraw(midway)
    holder.finish(midway, error="done by hand")
    with pytest.raises(ReconcileError, match="done by hand"):
        requester.wait(midway, 5)


def test_snapshot_request_claims_on_s3(seaweed_s3_local: dict[str, str]) -> None:
    """A snapshot request on the bucket: one holder claims it, its heartbeat keeps another
    holder off, a stop puts it back, and the claim of a holder that died is taken over."""
    root = LakeFile("s3://lake/inbox-root/d/_snapshot_requests", seaweed_s3_local)
    requester = SnapshotInbox(root, key=KEY)
    clock = [0.0]
    first = SnapshotInbox(LakeFile(root.uri, seaweed_s3_local), key=KEY)
    second = SnapshotInbox(LakeFile(root.uri, seaweed_s3_local), key=KEY, clock=lambda: clock[0])
    request_id = requester.submit(["db.t"], requester="test")
    claimed = first.claim()
    assert claimed is not None
    assert (claimed.request_id, claimed.tables) == (request_id, ["db.t"])
    assert second.claim() is None
    first.release(request_id)  # stopped after a chunk: waiting again
    again = second.claim()
    assert again is not None
    assert again.request_id == request_id

    third = SnapshotInbox(LakeFile(root.uri, seaweed_s3_local), key=KEY, clock=lambda: clock[0])
    assert not third.pending()
    claim_file = third.claimed.child(f"{request_id}.json")
    before = claim_file.modified()
    with second.keep_alive(request_id, interval=0.2):  # it works a while, then dies
        wait_until(lambda: claim_file.modified() != before, timeout=10, what="a heartbeat")
    clock[0] += STALE_AFTER_SECONDS
    assert not third.pending(), "a claim that changed is not stale"
    clock[0] += STALE_AFTER_SECONDS
    taken = third.claim()
    assert taken is not None
    assert taken.request_id == request_id
    third.finish(request_id, rows={"db.t": 7})
    answer = requester.wait(request_id, 5)
    assert answer is not None
    assert answer.rows == {"db.t": 7}
    assert not third.claimed.list(".json")
    assert not third.requests.list(".json")


def test_a_snapshot_with_its_lake_on_s3_is_finished_by_another_node(
    seaweed_s3_local: dict[str, str],
    mariadb: MariaDBDatabase,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """Change log, snapshot progress and the captured-tables record all in the bucket: one
    node stops after a chunk, another (sharing only the bucket and the source) finishes, and
    nothing is written to a local directory."""
    monkeypatch.setenv(PASSWORD_ENV, mariadb.user.password)
    monkeypatch.chdir(tmp_path)  # a relative path written by mistake would land here
    mariadb.server.execute(
        "CREATE TABLE t1 (id INT PRIMARY KEY, v INT)",
        "INSERT INTO t1 SELECT seq, seq FROM seq_1_to_350",
        "CREATE TABLE t2 (id INT PRIMARY KEY, v INT)",
        "INSERT INTO t2 SELECT seq, seq FROM seq_1_to_250",
        database=mariadb.name,
    )
    lake_root = "s3://lake/snapshot-root"
    options = {**seaweed_s3_local, "aws_conditional_put": "etag"}
    config = instance_config(
        mariadb.server, mariadb.user.name, [rf"{mariadb.name}\..*"], server_id=2141
    ).model_copy(update={"snapshot": SnapshotSettings(new_tables=True, chunk_size=100)})

    def term() -> WriteTerm:
        return WriteTerm("d", config, DestinationLake.at(lake_root, "d", options), epoch=0)

    runners: list[SnapshotRunner | None] = []

    def stop_after_first_chunk(progress: SnapshotProgress) -> None:
        runner = runners[-1]
        assert runner is not None
        runner.request_stop()

    snapshot_new_tables(term(), on_progress=stop_after_first_chunk, on_runner=runners.append)
    assert DestinationLake.at(lake_root, "d", options).snapshot_state.exists(), (
        "progress kept in the bucket"
    )
    result = snapshot_new_tables(term())  # the other node
    assert result is not None
    assert not DestinationLake.at(lake_root, "d", options).snapshot_state.exists()
    record = DestinationLake.at(lake_root, "d", options).captured_tables.read_json()
    assert record["tables"] == [f"{mariadb.name}.t1", f"{mariadb.name}.t2"]
    rows = (
        DeltaTable(f"{lake_root}/d/changes", storage_options=options)
        .to_pyarrow_table(columns=["op", "table", "pk"])
        .to_pylist()
    )
    keys = [(r["table"], r["pk"]) for r in rows if r["op"] == "r"]
    assert len(keys) == len(set(keys)) == 350 + 250
    assert list(tmp_path.iterdir()) == []


def test_credentials_from_a_named_profile(
    seaweed_s3_local: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No key in the options or the environment: the profile's static keys in the shared
    credentials file sign the requests (as delta-rs and the AWS SDKs read them)."""
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(key, raising=False)
    credentials = tmp_path / "credentials"
    credentials.write_text(
        "[default]\naws_access_key_id = nobody\naws_secret_access_key = wrong-secret\n\n"
        f"[lake]\naws_access_key_id = {seaweed_s3_local['AWS_ACCESS_KEY_ID']}\n"
        f"aws_secret_access_key = {seaweed_s3_local['AWS_SECRET_ACCESS_KEY']}\n"
    )
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(credentials))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_PROFILE", "lake")
    where = {k: v for k, v in seaweed_s3_local.items() if "KEY" not in k}
    item = LakeFile("s3://lake/profile-test/x.json", where)
    item.write_json({"n": 1})
    assert LakeFile(item.uri, where).read_json() == {"n": 1}
    assert item.delete()
    monkeypatch.setenv("AWS_PROFILE", "default")  # the wrong keys are refused
    with pytest.raises(SinkError, match=r"writing s3://lake/profile-test/x\.json failed"):
        LakeFile(item.uri, where).write_json({"n": 2})
