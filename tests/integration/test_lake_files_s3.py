"""The lake-file layer, the repair inbox and a snapshot with the lake on a real S3-compatible
server (SeaweedFS ``weed mini``).

The fixture ``seaweed_s3_local`` is local to this file: it starts its own ``weed mini`` with
every port given, so it cannot collide with other servers. Once the shared SeaweedFS fixture
of the test suite exists, this file should use that one instead.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from cdc_platform.backfill.new_tables import snapshot_new_tables
from cdc_platform.backfill.repair import RepairKey, RepairResult, RepairTable
from cdc_platform.backfill.snapshot import (
    SnapshotProgress,
    SnapshotRunner,
    captured_tables_path,
    state_path,
)
from cdc_platform.config.models import SnapshotSettings
from cdc_platform.errors import ReconcileError
from cdc_platform.reconcile.inbox import RepairInbox
from cdc_platform.sink.lake_files import LakeFile, s3_filesystem
from cdc_platform.sink.term import WriteTerm
from cdc_platform.testing.destinations import PASSWORD_ENV, instance_config
from cdc_platform.testing.processes import child_setup, free_port, stop_process, wait_until
from tests.conftest import MariaDBDatabase

pytestmark = pytest.mark.integration

_SERVICES = ("master", "volume", "filer", "admin", "s3")
KEY = b"k" * 32
_ACCESS, _SECRET = "lake-files-test", "lake-files-test-secret"  # test-only identity


def _options(port: int) -> dict[str, str]:
    return {
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
        "AWS_ALLOW_HTTP": "true",
        "AWS_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": _ACCESS,
        "AWS_SECRET_ACCESS_KEY": _SECRET,
    }


@pytest.fixture(scope="module")
def seaweed_s3_local(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """Storage options of a private ``weed mini`` serving the bucket ``lake``."""
    base = tmp_path_factory.mktemp("seaweed")
    weed = str(Path(sys.executable).parent / "weed")
    if not os.path.exists(weed):
        pytest.fail("weed not found next to the interpreter: install the dev extras")
    ports = {name: free_port() for name in _SERVICES}
    identity = {
        "name": "test",
        "credentials": [{"accessKey": _ACCESS, "secretKey": _SECRET}],
        "actions": ["Admin", "Read", "Write", "List", "Tagging"],
    }
    (base / "s3.json").write_text(json.dumps({"identities": [identity]}))
    cmd = [
        weed,
        "mini",
        f"-dir={base / 'data'}",
        "-bucket=lake",
        "-ip=127.0.0.1",
        "-ip.bind=127.0.0.1",
        "-admin.ui=false",
        "-webdav=false",
        f"-webdav.port={free_port()}",
        "-s3.port.iceberg=0",
        "-s3.port.lance=0",
        f"-debug.port={free_port()}",
        f"-s3.config={base / 's3.json'}",
        f"-filer.localSocket={base / 'filer.sock'}",
        f"-s3.localSocket={base / 's3.sock'}",
    ]
    for name, port in ports.items():
        cmd += [f"-{name}.port={port}", f"-{name}.port.grpc={free_port()}"]
    (base / "data").mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    log = base / "weed.log"
    with log.open("ab") as out:
        proc = subprocess.Popen(
            cmd,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=base,
            start_new_session=True,
            preexec_fn=child_setup(),  # noqa: PLW1509 (fixture runs in the main thread)
        )
    options = _options(ports["s3"])
    try:
        fs = s3_filesystem(options)

        def ready() -> bool:
            assert proc.poll() is None, log.read_text()[-2000:]
            try:
                fs.create_dir("lake")
                return bool(fs.get_file_info("lake").type == pafs.FileType.Directory)
            except OSError:
                return False

        wait_until(ready, timeout=60, what="SeaweedFS S3", log=log)
        yield options
    finally:
        stop_process(proc)


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
    table = pq.read_table(staging.path, filesystem=staging.filesystem)
    assert table.column("n").to_pylist() == [1, 2]
    root.delete_tree()
    assert not root.child("d", "claimed", "a.json").exists()


def test_snapshot_state_lives_on_s3(seaweed_s3_local: dict[str, str]) -> None:
    state = state_path("s3://lake/lake-root", "d", seaweed_s3_local)
    assert state.path == "lake/lake-root/d/_snapshot_state.json"
    state.write_json({"v": 1, "destination": "d"})
    again = state_path("s3://lake/lake-root/", "d", seaweed_s3_local)  # another node
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
    assert claimed == (request_id, tables)
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
    holder.requests.filesystem.copy_file(
        holder.requests.child(name).path, holder.claimed.child(name).path
    )
    assert not requester.withdraw(midway)
    holder.finish(midway, error="done by hand")
    with pytest.raises(ReconcileError, match="done by hand"):
        requester.wait(midway, 5)


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
        uri = f"{lake_root}/d/changes"
        return WriteTerm("d", config, uri, epoch=0, storage_options=options)

    runners: list[SnapshotRunner | None] = []

    def stop_after_first_chunk(progress: SnapshotProgress) -> None:
        runner = runners[-1]
        assert runner is not None
        runner.request_stop()

    snapshot_new_tables(
        term(), lake_root, on_progress=stop_after_first_chunk, on_runner=runners.append
    )
    assert state_path(lake_root, "d", options).exists(), "progress kept in the bucket"
    result = snapshot_new_tables(term(), lake_root)  # the other node
    assert result is not None
    assert not state_path(lake_root, "d", options).exists()
    record = captured_tables_path(lake_root, "d", options).read_json()
    assert record["tables"] == [f"{mariadb.name}.t1", f"{mariadb.name}.t2"]
    rows = (
        DeltaTable(f"{lake_root}/d/changes", storage_options=options)
        .to_pyarrow_table(columns=["op", "table", "pk"])
        .to_pylist()
    )
    keys = [(r["table"], r["pk"]) for r in rows if r["op"] == "r"]
    assert len(keys) == len(set(keys)) == 350 + 250
    assert list(tmp_path.iterdir()) == []
