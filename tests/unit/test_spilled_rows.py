"""Rows spilled to a local file commit exactly as the same rows held in memory."""

from __future__ import annotations

import tempfile
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from cdc_platform.backfill.whole_copy import copy_whole_table
from cdc_platform.errors import SnapshotSpillError
from cdc_platform.events import (
    ChangeEvent,
    EventKind,
    Op,
    ResumePosition,
    Transaction,
)
from cdc_platform.sink.schema import RowsAtCut, events_to_table
from cdc_platform.sink.spilled_rows import SPILL_PREFIX, RowSpill, SnapshotRows, commit_data
from cdc_platform.source.reading.table_description import SnapshotTable

pytestmark = pytest.mark.unit

CUT = ResumePosition(file="mysql-bin.000003", pos=4711, gtid_set="0-1-9")
COLUMNS = '[{"name":"a"}]'
IMAGES = [f'{{"a":{i % 3}}}' for i in range(7)]


def _truncate() -> ChangeEvent:
    txn = Transaction(
        start=CUT.binlog_position,
        gtid=None,
        gtid_set_before=None,
        server_id=0,
        timestamp=1_700_000_000,
    )
    return ChangeEvent(
        EventKind.DDL,
        txn,
        CUT.binlog_position,
        0,
        db="shop",
        table="bag",
        op=Op.DDL,
        ddl="TRUNCATE TABLE `shop`.`bag`",
        columns=COLUMNS,
    )


def _data(events: list[ChangeEvent], rows: SnapshotRows | None) -> pa.Table:
    build = partial(
        events_to_table,
        batch_seq=7,
        epoch=2,
        resume=CUT,
        committed_at=datetime(2026, 11, 25, 12, 0, tzinfo=UTC),
    )
    data = commit_data(events, 41, rows, build)
    return data.read_all() if isinstance(data, pa.RecordBatchReader) else data


@pytest.mark.parametrize("with_events", [True, False])
def test_spilled_rows_commit_as_the_rows_in_memory(tmp_path: Path, with_events: bool) -> None:
    """Three parts of rows: one seq range, txn_index 0..n-1, the resume on the last row."""
    events = [_truncate()] if with_events else []
    in_memory = RowsAtCut("shop", "bag", COLUMNS, CUT.binlog_position, 9, IMAGES, IMAGES)
    spill = RowSpill(str(tmp_path))
    for start in range(0, len(IMAGES), 3):
        spill.write(IMAGES[start : start + 3])
    spill.write([])
    spilled = spill.rows("shop", "bag", COLUMNS, CUT.binlog_position, 9)
    assert len(spilled) == len(IMAGES)
    assert [len(part) for part in spilled.parts()] == [3, 3, 1]
    streamed = _data(events, spilled)
    spill.remove()
    expected = _data(events, in_memory)
    assert streamed.to_pylist() == expected.to_pylist()
    assert streamed.schema == expected.schema
    resumes = streamed.column("resume_position").to_pylist()
    assert resumes[:-1] == [None] * (len(resumes) - 1)
    assert resumes[-1] == CUT.to_json()
    assert not list(tmp_path.glob(f"{SPILL_PREFIX}*")), "the spill is removed"


def test_an_empty_spill_commits_the_events_alone(tmp_path: Path) -> None:
    spill = RowSpill(str(tmp_path))
    data = _data([_truncate()], spill.rows("shop", "bag", COLUMNS, CUT.binlog_position, 9))
    spill.remove()
    assert data.num_rows == 1
    assert data.column("resume_position").to_pylist() == [CUT.to_json()]


def test_a_spill_that_cannot_be_made_names_its_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The temporary directory is not usable: one error saying where and what to do, before
    the copy connects to the source."""
    not_a_directory = tmp_path / "file"
    not_a_directory.write_text("")
    monkeypatch.setattr(tempfile, "tempdir", str(not_a_directory))
    spec = SnapshotTable("shop", "bag", (), (), COLUMNS)

    def never(*_: object) -> Any:
        raise AssertionError("not reached")

    with pytest.raises(SnapshotSpillError, match="point TMPDIR") as raised:
        copy_whole_table(never, spec, read_segment=never, commit=never, batch_rows=10)
    assert str(not_a_directory) in str(raised.value)
    assert raised.value.transient
