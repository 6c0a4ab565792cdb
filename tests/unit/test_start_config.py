"""`start:` of instance.yaml: validation, the recorded start and its drift, snapshot progress."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from cdc_platform.config.loader import load_destination
from cdc_platform.config.start import StartConfig
from cdc_platform.errors import ConfigFileError
from cdc_platform.sink.lake_files import LakeFile
from cdc_platform.sink.snapshot_progress import progress_of_state
from cdc_platform.sink.start_record import StartRecord, start_drift
from cdc_platform.source.stream.start_position import utc_seconds

pytestmark = pytest.mark.unit


def test_default_is_initial() -> None:
    assert StartConfig().mode == "initial"


@pytest.mark.parametrize(
    ("values", "problem"),
    [
        ({"mode": "position", "file": "mysql-bin.000001"}, "pos is missing"),
        ({"mode": "gtid"}, "gtid is missing"),
        ({"mode": "latest", "file": "x"}, "file is set but mode is latest"),
        ({"mode": "gtid", "gtid": "0-1"}, "neither a MariaDB GTID list"),
        ({"mode": "timestamp", "timestamp": "2026-11-22 10:00:00"}, "must be UTC"),
        ({"mode": "position", "file": "f", "pos": 1}, "greater than or equal to 4"),
        ({"mode": "sometime"}, "Input should be"),
    ],
)
def test_bad_starts_are_refused(values: dict[str, object], problem: str) -> None:
    with pytest.raises(ValidationError, match=problem):
        StartConfig(**values)


def test_good_starts() -> None:
    assert StartConfig(mode="gtid", gtid="0-1-42,1-2-7").gtid == "0-1-42,1-2-7"
    mysql = "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-42"
    assert StartConfig(mode="gtid", gtid=mysql).gtid == mysql
    stamp = StartConfig(mode="timestamp", timestamp="2026-11-22T10:00:00.5Z")
    assert utc_seconds(str(stamp.timestamp)) == 1795341600.5
    assert stamp.describe() == "timestamp timestamp=2026-11-22T10:00:00.5Z"


def test_loader_names_file_and_key(tmp_path: Path) -> None:
    (tmp_path / "instance.yaml").write_text(
        "source: {user: u, password_env: P, server_id: 5}\nstart: {mode: position, pos: 9}\n"
    )
    with pytest.raises(ConfigFileError) as caught:
        load_destination(tmp_path, environ={"P": "x"})
    assert "instance.yaml" in str(caught.value)
    assert "start" in str(caught.value)
    assert "file is missing" in str(caught.value)


def test_start_record_and_drift(tmp_path: Path) -> None:
    file = LakeFile(str(tmp_path / "_start.json"))
    assert StartRecord.load(file) is None
    assert start_drift(StartConfig(mode="latest"), None) is None
    began = StartConfig(mode="gtid", gtid="0-1-5")
    StartRecord.write(file, began, None)
    record = StartRecord.load(file)
    assert record is not None
    assert record.start == began
    assert start_drift(began, record) is None
    drift = start_drift(StartConfig(mode="latest"), record)
    assert drift is not None
    assert "now latest" in drift
    assert "gtid gtid=0-1-5" in drift


def test_progress_of_a_snapshot_state() -> None:
    state = {
        "tables": ["d.a", "d.b", "d.c", "d.gone"],
        "index": 1,
        "ended": {"d.gone": "dropped"},
        "progress": {
            "d.a": {"rows_read": 120, "estimated_rows": 100, "chunks": 2},
            "d.b": {"rows_read": 50, "estimated_rows": 200, "chunks": 1},
        },
    }
    got = {
        p.table: (p.state, p.rows_read, p.estimated_rows, p.percent)
        for p in progress_of_state(state)
    }
    assert got == {
        "d.a": ("done", 120, 100, 100.0),
        "d.b": ("copying", 50, 200, 25.0),
        "d.c": ("waiting", 0, 0, 0.0),
        "d.gone": ("ended", 0, 0, 100.0),
    }
    low_estimate = {"x.y": {"rows_read": 9, "estimated_rows": 3}}
    over = progress_of_state({"tables": ["x.y"], "index": 0, "progress": low_estimate})
    assert over[0].percent == 99.0  # an estimate too low never shows a table done early
