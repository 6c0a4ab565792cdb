"""The lake-file layer on a local directory: URI joins, whole-object writes, listing, moves."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cdc_platform.errors import ConfigError, StaleSideFileError
from cdc_platform.sink.lake_files import LakeFile, join_uri

pytestmark = pytest.mark.unit


def test_join_uri_keeps_the_scheme() -> None:
    assert join_uri("s3://lake/prefix", "d", "_reconcile") == "s3://lake/prefix/d/_reconcile"
    assert join_uri("s3://lake/prefix/", "d") == "s3://lake/prefix/d"
    assert join_uri("var/lake", "d", "x.json") == "var/lake/d/x.json"
    assert join_uri("/", "x") == "/x"


@pytest.mark.parametrize("part", ["", "/abs", "a/../b", "a//b"])
def test_join_uri_refuses_parts_that_escape(part: str) -> None:
    with pytest.raises(ValueError, match="relative lake path"):
        join_uri("s3://lake", part)


def test_unsupported_scheme_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="unsupported lake scheme 'ftp'"):
        LakeFile("ftp://host/lake")


def test_s3_uri_maps_to_bucket_and_key() -> None:
    lake = LakeFile("s3://lake/prefix/", {"AWS_REGION": "us-east-1"})
    assert not lake.is_local
    assert lake.path == "lake/prefix"
    assert lake.child("d", "x.json").path == "lake/prefix/d/x.json"
    assert lake.child("d", "x.json").uri == "s3://lake/prefix/d/x.json"


def test_plain_http_endpoint_needs_allow_http() -> None:
    with pytest.raises(ConfigError, match="AWS_ALLOW_HTTP"):
        LakeFile("s3://lake/p", {"AWS_ENDPOINT_URL": "http://127.0.0.1:1", "AWS_ALLOW_HTTP": "0"})


def test_write_read_list_delete(tmp_path: Path) -> None:
    root = LakeFile(str(tmp_path / "lake"))
    folder = root.child("d", "requests")
    assert folder.list(".json") == []
    assert folder.child("a.json").read_json() is None
    folder.child("b.json").write_json({"n": 2})
    folder.child("a.json").write_json({"n": 1})
    folder.child("note.txt").write_text("x")
    assert folder.list(".json") == ["a.json", "b.json"]
    assert folder.child("a.json").read_json() == {"n": 1}
    assert not [p for p in os.listdir(folder.path) if p.endswith(".tmp")]
    folder.child("a.json").write_json({"n": 3})  # replaced whole
    assert folder.child("a.json").read_json() == {"n": 3}
    assert folder.child("a.json").delete()
    assert not folder.child("a.json").delete()
    assert folder.list(".json") == ["b.json"]
    root.child("d").delete_tree()
    assert not root.child("d").exists()
    root.child("d").delete_tree()  # absent: nothing to do


def test_move_has_one_winner_locally(tmp_path: Path) -> None:
    root = LakeFile(f"file://{tmp_path}")
    source = root.child("requests", "r.json")
    source.write_text("{}")
    target = root.child("claimed", "r.json")
    assert source.move_to(target)
    assert not source.move_to(root.child("claimed", "again.json"))
    assert target.read_text() == "{}"
    assert not source.exists()


def test_touch_and_modified(tmp_path: Path) -> None:
    item = LakeFile(str(tmp_path)).child("c.json")
    assert item.modified() is None
    item.write_text("{}")
    os.utime(item.path, (1000.0, 1000.0))
    assert item.modified() == 1000.0
    item.touch()
    assert (item.modified() or 0.0) > 1000.0


def test_state_locations_are_uris_under_the_lake_root() -> None:
    from cdc_platform.backfill.request_inbox import repair_inbox  # noqa: PLC0415 (this test's subject, imported where it is used)
    from cdc_platform.sink.destination_lake import DestinationLake  # noqa: PLC0415 (this test's subject, imported where it is used)
    from cdc_platform.spark.locations import mirror_root  # noqa: PLC0415 (this test's subject, imported where it is used)

    root = "s3://lake/prefix"
    assert (
        DestinationLake.at(root, "d").snapshot_state.uri
        == "s3://lake/prefix/d/_snapshot_state.json"
    )
    assert (
        DestinationLake.at(root, "d").captured_tables.uri
        == "s3://lake/prefix/d/_captured_tables.json"
    )
    assert repair_inbox(DestinationLake.at(root, "d")).root.uri == "s3://lake/prefix/d/_reconcile"
    assert mirror_root(root, "d") == "s3://lake/prefix/d/mirror"
    assert mirror_root(Path("/x/lake"), "d") == "/x/lake/d/mirror"


def test_parquet_staging_round_trips(tmp_path: Path) -> None:
    import pyarrow as pa  # noqa: PLC0415 (pyarrow only for this test)
    import pyarrow.parquet as pq  # noqa: PLC0415 (pyarrow only for this test)

    staging = LakeFile(str(tmp_path)).child("_cdc_staging", "reconcile-x")
    staging.child("part-00000.parquet").write_parquet(pa.table({"n": [1, 2]}))
    assert staging.list(".parquet") == ["part-00000.parquet"]
    assert pq.read_table(staging.path).column("n").to_pylist() == [1, 2]
    staging.delete_tree()
    assert not staging.exists()


def test_unreachable_store_is_a_sink_error_naming_the_uri_without_secrets() -> None:
    """Nothing listens on the endpoint (a real refused connection, no mock)."""
    from cdc_platform.errors import SinkError  # noqa: PLC0415 (this test's subject, imported where it is used)
    from cdc_platform.testing.processes import free_port  # noqa: PLC0415 (this test's subject, imported where it is used)

    secret = "lake-files-unit-secret-value"
    options = {
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{free_port()}",
        "AWS_ALLOW_HTTP": "true",
        "AWS_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "AKIDEXAMPLE",
        "AWS_SECRET_ACCESS_KEY": secret,
    }
    item = LakeFile("s3://lake/p/x.json", options)
    with pytest.raises(SinkError, match=r"reading s3://lake/p/x.json failed") as caught:
        item.read_text()
    assert secret not in str(caught.value)
    assert caught.value.transient


def test_a_write_based_on_an_old_read_is_refused(tmp_path: Path) -> None:
    """Fencing on a local disk: a handle writes only over the version it read."""
    path = str(tmp_path / "d" / "_snapshot_state.json")
    LakeFile(path).write_json({"term": 1})
    old, new = LakeFile(path), LakeFile(path)
    assert old.read_json() == new.read_json() == {"term": 1}
    new.write_json({"term": 2})
    with pytest.raises(StaleSideFileError, match=r"_snapshot_state\.json: it changed"):
        old.write_json({"term": 1, "more": True})
    with pytest.raises(StaleSideFileError):
        old.delete()
    assert LakeFile(path).read_json() == {"term": 2}
    new.write_json({"term": 2, "more": True})  # its own write is the version it knows
    blind = LakeFile(path)  # never looked: writes unconditionally (inbox files, staging)
    blind.write_json({"blind": True})
    assert LakeFile(path).read_json() == {"blind": True}
    assert not [n for n in os.listdir(tmp_path / "d") if n.startswith(".")]


def test_folders_and_copies(tmp_path: Path) -> None:
    root = LakeFile(str(tmp_path))
    root.child("a", "x.json").write_text("{}")
    root.child("b", "y.json").write_text("{}")
    assert root.folders() == ["a", "b"]
    assert root.child("a", "x.json").copy_to(root.child("c", "x.json"))
    assert not root.child("a", "gone.json").copy_to(root.child("c", "gone.json"))
    assert root.child("c", "x.json").read_bytes() == b"{}"
    assert root.child("a", "x.json").exists()


def test_a_fenced_delete_after_the_folder_went_is_false(tmp_path: Path) -> None:
    item = LakeFile(str(tmp_path / "d" / "_reread_tables.json"))
    item.write_json({"tables": {}})
    LakeFile(str(tmp_path / "d")).delete_tree()
    assert not item.delete()
