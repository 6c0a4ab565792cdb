"""Rows of one table read into a local file first, then committed as one change-log commit.

A whole-table copy (:mod:`cdc_platform.backfill.whole_copy`) reads every row of a table in
one consistent read and commits them with the truncate that precedes them in one Delta commit,
so a reader sees the table before the copy or after it, never part of it, and a copy cut short
leaves the old rows. Holding all rows in memory is not possible for a large table, and holding
the server's unbuffered read open while the lake commits is not safe (a commit slower than the
server's ``net_write_timeout`` ends the read). So the read goes to a local file as fast as the
server sends it: Arrow IPC, zstd-compressed, one record batch per part of rows
(:class:`RowSpill`, in a temporary directory named ``cdc-copy-*`` under ``TMPDIR``, removed
when the copy ends). The commit streams that file into the Delta write part by part
(:func:`commit_data`), so memory holds one part; the disk holds the compressed table.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.ipc

from cdc_platform.events import BinlogPosition, ChangeEvent
from cdc_platform.sink.schema import WRITE_SCHEMA, RowsAtCut

__all__ = ["SPILL_PREFIX", "Build", "RowSpill", "SnapshotRows", "SpilledRows", "commit_data"]

SPILL_PREFIX = "cdc-copy-"
"""Name prefix of a spill's temporary directory."""

_SCHEMA = pa.schema([pa.field("image", pa.string(), nullable=False)])
_OPTIONS = pyarrow.ipc.IpcWriteOptions(compression="zstd")


@dataclass(frozen=True, slots=True)
class SpilledRows:
    """A table's rows at one cut, in a spill file: :class:`~.schema.RowsAtCut` too large for
    memory. A keyless table's rows, whose ``pk`` is the whole image (only images are kept)."""

    db: str
    table: str
    columns: str
    position: BinlogPosition
    timestamp: int
    path: Path
    count: int

    def __len__(self) -> int:
        return self.count

    def parts(self) -> Iterator[RowsAtCut]:
        """The rows part by part, as they were spilled (``txn_index`` numbered on)."""
        with pa.OSFile(str(self.path), "rb") as source:
            reader = pyarrow.ipc.open_file(source)
            first = 0
            for index in range(reader.num_record_batches):
                images = reader.get_batch(index).column(0)
                yield RowsAtCut(
                    self.db,
                    self.table,
                    self.columns,
                    self.position,
                    self.timestamp,
                    images,
                    images,
                    first,
                )
                first += len(images)


SnapshotRows = RowsAtCut | SpilledRows
"""Rows read from a table that a commit carries after its events (op ``r``)."""


class RowSpill:
    """A spill file that parts of row images are appended to (:meth:`write`), then read as
    :class:`SpilledRows` (:meth:`rows`); :meth:`remove` deletes its directory."""

    def __init__(self, directory: str | None = None) -> None:
        self.directory = Path(tempfile.mkdtemp(prefix=SPILL_PREFIX, dir=directory))
        """The spill's temporary directory."""
        self._path = self.directory / "rows.arrow"
        self._file = pa.OSFile(str(self._path), "wb")
        self._writer = pyarrow.ipc.new_file(self._file, _SCHEMA, options=_OPTIONS)
        self._count = 0
        self._open = True

    def _close(self) -> None:
        if self._open:
            self._open = False
            self._writer.close()
            self._file.close()

    def remove(self) -> None:
        """Close the file and delete the spill's directory."""
        self._close()
        shutil.rmtree(self.directory, ignore_errors=True)

    def write(self, images: Sequence[str]) -> None:
        """Append one part of row images (JSON text)."""
        if images:
            self._writer.write_batch(pa.record_batch([pa.array(images, pa.string())], _SCHEMA))
            self._count += len(images)

    def rows(
        self, db: str, table: str, columns: str, position: BinlogPosition, timestamp: int
    ) -> SpilledRows:
        """The rows written, placed at ``position``; nothing more can be written."""
        self._close()
        return SpilledRows(db, table, columns, position, timestamp, self._path, self._count)


Build = Callable[..., pa.Table]
"""A commit's :func:`~.schema.events_to_table` with its commit fields bound (batch, epoch,
resume, time): called with the events, ``first_seq`` and in-memory ``snapshot`` rows."""


def commit_data(
    events: Sequence[ChangeEvent], first_seq: int, snapshot: SnapshotRows | None, build: Build
) -> pa.Table | pa.RecordBatchReader:
    """One commit's rows from ``build``: a table, or for spilled rows a reader that streams
    them from their file, part after part (the resume position on the commit's last row)."""
    if not isinstance(snapshot, SpilledRows) or not len(snapshot):
        rows = snapshot if isinstance(snapshot, RowsAtCut) else None
        return build(events, first_seq=first_seq, snapshot=rows)

    end = first_seq + len(events) + len(snapshot)

    def batches() -> Iterator[pa.RecordBatch]:
        seq = first_seq
        if events:
            yield from _no_resume(build(events, first_seq=seq)).to_batches()
            seq += len(events)
        for part in snapshot.parts():
            table = build([], first_seq=seq, snapshot=part)
            seq += len(part)
            yield from (table if seq == end else _no_resume(table)).to_batches()

    return pa.RecordBatchReader.from_batches(WRITE_SCHEMA, batches())


def _no_resume(table: pa.Table) -> pa.Table:
    """``table`` without its resume position: more rows of the commit follow it."""
    index = table.schema.get_field_index("resume_position")
    return table.set_column(index, "resume_position", pa.nulls(table.num_rows, pa.string()))
