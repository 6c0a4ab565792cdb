"""One destination's lake layout: every file and table named by one value, as before."""

from __future__ import annotations

from datetime import date
from pathlib import Path

import pytest

from cdc_platform.backfill.request_inbox import repair_inbox, snapshot_inbox
from cdc_platform.config.instance import InstanceConfig
from cdc_platform.config.lake import LakeLocation
from cdc_platform.sink.destination_lake import DestinationLake
from cdc_platform.sink.term import WriteTerm
from cdc_platform.spark.locations import mirror_root

pytestmark = pytest.mark.unit

_S3 = "s3://bucket/prefix"


def _config(table: str = "changes") -> InstanceConfig:
    return InstanceConfig.model_validate(
        {
            "source": {"host": "127.0.0.1", "user": "cdc", "password_env": "X", "server_id": 9},
            "sink": {"table": table},
        }
    )


def test_every_name_of_a_destination_on_s3() -> None:
    layout = DestinationLake(LakeLocation(_S3, {"aws_region": "x"}), "shop", "log")
    assert layout.root == f"{_S3}/shop"
    assert layout.change_log == f"{_S3}/shop/log"
    assert layout.mirrors_root == f"{_S3}/shop/mirror"
    assert layout.history_root(date(2026, 1, 2)) == f"{_S3}/shop/history/2026-01-02"
    files = {
        "snapshot_state": layout.snapshot_state,
        "captured_tables": layout.captured_tables,
        "reread_tables": layout.reread_tables,
        "start_record": layout.start_record,
    }
    assert {k: f.uri for k, f in files.items()} == {
        "snapshot_state": f"{_S3}/shop/_snapshot_state.json",
        "captured_tables": f"{_S3}/shop/_captured_tables.json",
        "reread_tables": f"{_S3}/shop/_reread_tables.json",
        "start_record": f"{_S3}/shop/_start.json",
    }
    assert all(f.storage_options == {"aws_region": "x"} for f in files.values())
    assert layout.snapshot_inbox == f"{_S3}/shop/_snapshot_requests"
    assert layout.repair_inbox == f"{_S3}/shop/_reconcile"


def test_the_change_log_folder_comes_from_the_config() -> None:
    lake = LakeLocation("/lake")
    assert DestinationLake.in_lake(lake, "d", _config("events")).change_log == "/lake/d/events"
    assert DestinationLake.in_lake(lake, "d").change_log == "/lake/d/changes"


def test_a_layout_opens_its_change_log_with_the_lake_options() -> None:
    layout = DestinationLake(LakeLocation(_S3, {"k": "v"}), "shop", "log")
    change_log = layout.open_change_log()
    assert change_log.table_uri == layout.change_log
    assert change_log.destination == "shop"
    assert "1 keys: k" in repr(change_log)
    change_log.close()


def test_a_term_names_its_files_in_its_lake_or_beside_its_table(tmp_path: Path) -> None:
    lake = LakeLocation(str(tmp_path / "lake"))
    in_lake = WriteTerm.in_lake("d", _config("events"), lake)
    assert in_lake.layout == DestinationLake(lake, "d", "events")
    assert in_lake.checked_lake
    table_only = WriteTerm("d", _config(), DestinationLake.at(tmp_path / "elsewhere", "d"))
    assert table_only.layout.start_record.uri == str(tmp_path / "elsewhere" / "d" / "_start.json")


def test_a_bare_lake_root_names_the_same_places() -> None:
    """A layout at a lake root given as it is (a trailing slash or not), and the inboxes and
    mirror root built from it, name the paths they always named."""
    opts = {"aws_region": "x"}
    assert (
        DestinationLake.at(_S3 + "/", "d", opts).snapshot_state.uri
        == f"{_S3}/d/_snapshot_state.json"
    )
    assert (
        DestinationLake.at(_S3, "d", opts).captured_tables.uri == f"{_S3}/d/_captured_tables.json"
    )
    assert DestinationLake.at(_S3, "d", opts).reread_tables.uri == f"{_S3}/d/_reread_tables.json"
    assert repair_inbox(DestinationLake.at(_S3, "d", opts)).root.uri == f"{_S3}/d/_reconcile"
    requests = snapshot_inbox(DestinationLake.at(_S3, "d", opts))
    assert requests.root.uri == f"{_S3}/d/_snapshot_requests"
    assert mirror_root(_S3, "d") == f"{_S3}/d/mirror"
    assert DestinationLake.at(_S3, "d", opts).snapshot_state.storage_options == opts


def test_a_name_that_climbs_out_of_the_lake_is_refused() -> None:
    with pytest.raises(ValueError, match="plain relative"):
        _ = DestinationLake(LakeLocation("/lake"), "../other").root
