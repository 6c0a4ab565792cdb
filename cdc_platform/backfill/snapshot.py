"""A consistent snapshot of existing rows into a destination's change log, without locks.

The watermark method of DBLog / Debezium's incremental snapshot, run as its own step while
the destination's normal run is stopped (the CLI holds the destination's lease). This step
is the only writer: it streams the binlog from the change log's checkpoint itself and, for
each primary-key chunk of a table,

1. SELECTs the chunk (one autocommit read, no lock); the low watermark is the previous
   chunk's cut, where its segment begins,
2. takes the high watermark (the server's binlog end, on the same connection),
3. reads the binlog on to the high watermark (the *segment*: every event since the previous
   cut, whole transactions only),
4. drops from the chunk every row whose key any event of the segment touched (the segment
   carries that key's newer, or equal, state), and
5. commits the segment's events followed by the remaining rows as op ``r``, with the
   segment's end as the resume position, in one Delta commit.

A long segment (the backlog before the first chunk) is committed in parts of about
``segment_events`` events before the chunk's commit; only the chunk's keys it touched are
kept, so memory stays bounded. The parts precede the chunk's rows in ``seq`` order exactly as
if they were in its commit.

Why it is exact: all events up to the cut precede the ``r`` rows in ``seq`` order and all
later events follow them. A row left in the chunk had no event in the segment, so its state
at the cut is what the SELECT read (the SELECT ran inside the segment's time span); a row
that had one is represented by the segment's events. Dropping keys of the whole segment
(not only of (low, high]) is a superset, which is safe for the same reason and also covers
transactions after the low cut already in the binlog but not yet visible to InnoDB when the
SELECT ran. A transaction *before* the low cut can be invisible to the SELECT too (the binlog
is written before the engine commits): its key would read the older state and the `r` row,
placed after it, would revert it. So the keys the newest ``segment_events`` row events before
the low cut touched are dropped as well (:class:`~.segments.SegmentTail`); their state is in
the log already, in those events' FULL row images.

Progress lives in a small JSON file next to the change log, written before each commit as
*pending* (with a random mark the chunk's commit also carries, as the app transaction
``<destination>#chunk``) and confirmed after it; on restart a pending chunk whose mark is the
change log's newest counts as done, otherwise it is read again. So a kill -9 costs at most
one chunk and never duplicates or loses a change. Once every table is done the file is
removed and the normal run resumes from the change log's checkpoint, which now sits after the
snapshot. A table that cannot be copied any more (dropped, renamed, its key removed) ends with
a reason in the file and the result instead of failing every rerun.

The runner writes under its caller's :class:`~cdc_platform.sink.term.WriteTerm` (the lease's
epoch and commit gate). The gate only runs before commits, so a
:class:`~cdc_platform.backfill.stop.SideWorkStop` triggered by the lease-loss callback cuts the
source connection: a chunk read blocked on the source (a table lock, a partition) ends at once
with LeaseLostError instead of at the read timeout.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import pymysql

from cdc_platform.backfill.chunk_bytes import rows_within
from cdc_platform.backfill.chunk_sizing import ChunkSizer
from cdc_platform.backfill.commit import commit_beside
from cdc_platform.backfill.progress import SnapshotProgress, SnapshotResult
from cdc_platform.backfill.segments import ChunkSegment, SegmentStream, SegmentTail, chunk_segment
from cdc_platform.backfill.stop import SideWorkStop
from cdc_platform.backfill.table_definition import definition_event
from cdc_platform.backfill.whole_copy import copy_whole_table
from cdc_platform.errors import CdcError, SnapshotError, SourceTableMissingError
from cdc_platform.events import BinlogPosition, ChangeEvent, ResumePosition
from cdc_platform.sink import DeltaChangeLog
from cdc_platform.sink.destination_lake import DestinationLake
from cdc_platform.sink.lake_files import LakeFile
from cdc_platform.sink.schema import RowsAtCut
from cdc_platform.sink.snapshot_state import PendingChunk, SnapshotState, TableCounts
from cdc_platform.sink.term import WriteTerm
from cdc_platform.source.binlog import BinlogSource
from cdc_platform.source.binlog_server import binlog_end
from cdc_platform.source.mysql import connect_source, is_missing_table, mysql_error
from cdc_platform.source.row_reader import (
    ChunkRows,
    SnapshotTable,
    base_tables,
    decode_key,
    describe_table,
    encode_key,
    estimated_rows,
    read_chunk,
)
from cdc_platform.source.table_names import split_table_name

__all__ = [
    "DEFAULT_SEGMENT_EVENTS",
    "SnapshotProgress",
    "SnapshotResult",
    "SnapshotRunner",
    "captured_tables_path",
    "state_path",
]

log = logging.getLogger(__name__)

DEFAULT_SEGMENT_EVENTS = 20_000
"""Binlog events held at most per segment part (and read ahead): a longer segment is
committed in parts, at transaction boundaries."""
_SNAPSHOT_HEARTBEAT_SECONDS = 0.25
"""Short server heartbeat, so a held-back quiet COMMIT reaches the cut without delay."""


def state_path(
    lake_root: str | os.PathLike[str],
    destination: str,
    storage_options: Mapping[str, str] | None = None,
) -> LakeFile:
    """Where a destination's snapshot progress is kept: in the lake (a local path or a URI),
    so any node can finish a snapshot another one began."""
    return DestinationLake.at(lake_root, destination, storage_options).snapshot_state


def captured_tables_path(
    lake_root: str | os.PathLike[str],
    destination: str,
    storage_options: Mapping[str, str] | None = None,
) -> LakeFile:
    """Where the tables a destination already has a copy of are recorded (in the lake)."""
    return DestinationLake.at(lake_root, destination, storage_options).captured_tables


class SnapshotRunner:
    """Snapshots tables of one destination into its change log; see the module docstring.

    ``term`` says who writes (its epoch: the lease's, None: the checkpoint's; its gate runs
    before each commit); ``stop`` (see :class:`SideWorkStop`) interrupts a run at once.
    ``chunk_size`` fixes the rows per chunk; without it each chunk's rows adapt so that a
    chunk takes about ``chunk_seconds`` (:mod:`.chunk_sizing`; ``clock`` times them).
    """

    def __init__(  # noqa: PLR0913 (the term, the state file; what to copy in which steps, its observers and stop, keyword-only)
        self,
        term: WriteTerm,
        state_file: LakeFile | str | os.PathLike[str],
        *,
        tables: Sequence[str] | None = None,
        chunk_size: int | None = None,
        chunk_seconds: float | None = None,
        segment_events: int = DEFAULT_SEGMENT_EVENTS,
        on_progress: Callable[[SnapshotProgress], None] | None = None,
        on_table_done: Callable[[str, str | None], None] | None = None,
        stop: SideWorkStop | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        name, config = term.destination, term.config
        sizer = ChunkSizer.for_settings(chunk_size, chunk_seconds)
        if segment_events < 1:
            raise ValueError(f"segment_events must be >= 1, not {segment_events}")
        if config.source.mode != "binlog":
            raise SnapshotError(
                f"{name}: the snapshot merges chunks with the binlog; a destination in the "
                f"{config.source.mode} source mode copies existing rows itself (docs/id_watch.md)"
            )
        self.term = term
        self.name = name
        self.config = config
        self.table_uri = term.table_uri
        self.state_file = (
            state_file
            if isinstance(state_file, LakeFile)
            else LakeFile(os.fspath(state_file), term.storage_options)
        )
        self.requested = list(tables) if tables else None
        self.sizer = sizer
        self._clock = clock
        self.segment_events = segment_events
        self._on_progress = on_progress
        self._on_table_done = on_table_done
        self._interrupt = stop or SideWorkStop(name, term.epoch, work="snapshot")
        self._stop = threading.Event()

    def request_stop(self) -> None:
        """End after the current chunk (progress is kept; a rerun continues)."""
        self._stop.set()

    def interrupt(self, reason: str) -> None:
        """End now, even inside a blocked source read (the lease is gone): see ``stop``."""
        self._interrupt.request_stop(reason)

    # -- state ---------------------------------------------------------------------------------

    def _load_state(self) -> SnapshotState | None:
        return SnapshotState.load(self.state_file, self.name)

    def _save_state(self, state: SnapshotState) -> None:
        state.save(self.state_file)  # the whole object at once

    # -- run -----------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _source(self) -> Iterator[pymysql.connections.Connection[Any]]:
        """A source connection that a stop cuts; closed on exit."""
        conn = connect_source(self.config.source, self.term.password, purpose="snapshot")
        self._interrupt.attach(conn)
        try:
            yield conn
        finally:
            self._interrupt.attach(None)
            with contextlib.suppress(pymysql.MySQLError, OSError):
                conn.close()

    @contextlib.contextmanager
    def _errors(self, doing: str) -> Iterator[None]:
        """The engine's errors only: the stop's LeaseLostError once interrupted, a driver
        error translated."""
        try:
            yield
        except (CdcError, pymysql.MySQLError, OSError) as exc:
            if self._interrupt.reason is not None:
                raise self._interrupt.error() from None
            if isinstance(exc, pymysql.MySQLError):
                raise mysql_error(exc, f"{self.name}: {doing}") from exc
            raise

    def _discover(self, conn: pymysql.connections.Connection[Any]) -> list[str]:
        source = self.config.source
        if self.requested:
            names = []
            for name in self.requested:
                db, sep, table = name.partition(".")
                if not sep or not db or not table:
                    raise SnapshotError(f"--table {name!r}: expected db.table")
                names.append(name)
            return names
        return base_tables(conn, source.include_tables, source.exclude_tables)

    def captured_tables(self) -> list[str]:
        """Every base table the destination's filters capture now (``db.table``)."""
        with self._errors("listing tables"), self._source() as conn:
            return self._discover(conn)

    def keyless(self, tables: Sequence[str]) -> dict[str, str]:
        """Tables of ``tables`` the snapshot cannot copy, with why (gone, a column it cannot
        read). Tables without a primary key are copied whole (:mod:`.whole_copy`)."""
        refused: dict[str, str] = {}
        with self._errors("describing tables"), self._source() as conn:
            for name in tables:
                try:
                    describe_table(conn, *split_table_name(conn, name), require_key=False)
                except SnapshotError as exc:
                    refused[name] = str(exc)
        return refused

    def run(self) -> SnapshotResult:
        """Snapshot every requested table (or resume the one in progress) and return a summary.

        A table of a resumed snapshot that can no longer be copied (dropped, renamed, a column
        it cannot read) ends with a logged reason in ``SnapshotResult.ended`` and the state;
        the other tables go on. Tables without a primary key are copied whole.

        Raises:
            SnapshotError: unreadable column, another snapshot in progress.
            SourceError, SinkError: the source or the change log failed; rerun to continue.
            LeaseLostError: interrupted by ``stop``; nothing was committed after it.
        """
        with self._errors("snapshot"), self._source() as conn:
            return self._run(conn)

    def _run(self, conn: pymysql.connections.Connection[Any]) -> SnapshotResult:
        started = time.perf_counter()
        sink = self.term.open_change_log()
        stream: SegmentStream | None = None
        try:
            self._interrupt.check()
            checkpoint = sink.recover()
            epoch = (
                self.term.epoch
                if self.term.epoch is not None
                else (checkpoint.epoch if checkpoint else 0)
            )
            batch_seq = checkpoint.batch_seq if checkpoint else 0
            state = self._load_state()
            resumed = state is not None
            if state is None:
                tables = self._discover(conn)
                state = SnapshotState(self.name, tables)
            else:
                if self.requested and list(self.requested) != list(state.tables):
                    raise SnapshotError(
                        f"{self.name}: a snapshot of {', '.join(state.tables)} is in progress "
                        f"({self.state_file}); run it to the end first (without --table, or with "
                        "the same tables), or delete that file to abandon it"
                    )
                pending = state.pending
                if pending is not None:
                    if self._landed(sink, pending):
                        state.index, state.after = pending.index, pending.after
                    state.pending = None
                log.info(
                    "%s: resuming the snapshot at table %d of %d after key %s",
                    self.name,
                    state.index + 1,
                    len(state.tables),
                    state.after,
                )
            specs = [
                self._describe(conn, name, pending=resumed or i < state.index)
                for i, name in enumerate(state.tables)
            ]
            source_config = self.config.source.model_copy(
                update={"heartbeat_seconds": _SNAPSHOT_HEARTBEAT_SECONDS}
            )
            probe = BinlogSource(source_config, password=self.term.password)
            probe.check()
            resume = checkpoint.resume if checkpoint else probe.current_position()
            source = BinlogSource(source_config, resume=resume, password=self.term.password)
            stream = SegmentStream(source, read_ahead=self.segment_events)
            result = SnapshotResult(tables=list(state.tables), resumed=resumed)
            tail = SegmentTail(self.segment_events)
            ctx = _Chunking(
                conn, probe, stream, tail, sink, epoch, result, started, batch_seq, resume
            )
            while state.index < len(specs) and not self._stop.is_set():
                spec = specs[state.index]
                if isinstance(spec, str):
                    self._end(state, state.tables[state.index], spec, result)
                    continue
                self._table(ctx, spec, state)
            result.last_batch_seq = ctx.batch_seq
            result.resume = ctx.resume
            result.seconds = time.perf_counter() - started
            if state.index >= len(specs):
                self.state_file.delete()
            return result
        finally:
            if stream is not None:
                stream.stop()
            sink.close()

    def _describe(
        self, conn: pymysql.connections.Connection[Any], name: str, *, pending: bool
    ) -> SnapshotTable | str:
        """The table's spec; for a snapshot already under way, why it cannot go on instead
        of an error (a fresh request for a table that cannot be copied is refused)."""
        try:
            return describe_table(conn, *split_table_name(conn, name), require_key=False)
        except SnapshotError as exc:
            if not pending:
                raise
            return str(exc)

    def _end(self, state: SnapshotState, name: str, reason: str, result: SnapshotResult) -> None:
        """End one table's snapshot without copying the rest of it; the others go on."""
        log.warning("%s: ending the snapshot of %s: %s", self.name, name, reason)
        state.end(name, reason)
        self._save_state(state)
        result.ended[name] = reason
        if self._on_table_done is not None:
            self._on_table_done(name, reason)

    def _landed(self, sink: DeltaChangeLog, pending: PendingChunk) -> bool:
        """Whether the interrupted chunk's commit is in the change log.

        Only the chunk's own mark counts (app transaction ``<destination>#chunk``, kept by
        log cleanup): another writer (a repair, a normal run started in between) may have
        committed the same batch number, even with `r` rows of the same table. Without a mark
        (a state written before marks) the chunk is read again, which is always safe (its `r`
        rows land later, with the newer state); skipping it would lose rows.
        """
        return pending.chunk is not None and sink.chunk_mark() == pending.chunk

    def _commit(
        self,
        ctx: _Chunking,
        events: list[ChangeEvent],
        cut: ResumePosition,
        rows: RowsAtCut | None = None,
        chunk: int | None = None,
    ) -> None:
        """Commit batch ``ctx.batch_seq`` (``events``, then a chunk's ``rows`` as op ``r``,
        marked ``chunk``) under the stop and the one commit protocol; the run resumes after
        ``cut`` from then on."""
        self._interrupt.check()
        commit_beside(
            self.term,
            ctx.sink,
            events,
            batch_seq=ctx.batch_seq,
            resume=cut,
            epoch=ctx.epoch,
            snapshot=rows,
            chunk=chunk,
        )
        ctx.resume = cut

    def _segment(
        self, ctx: _Chunking, spec: SnapshotTable, chunk_keys: set[str], high: BinlogPosition
    ) -> ChunkSegment:
        """Read the chunk's segment up to ``high``, committing full parts of it on the way
        (:func:`~.segments.chunk_segment`)."""

        def commit_part(part: list[ChangeEvent], cut: ResumePosition) -> None:
            ctx.batch_seq += 1
            self._commit(ctx, part, cut)

        segment = chunk_segment(
            ctx.stream,
            ctx.tail,
            spec,
            chunk_keys,
            high=high,
            cut=ctx.resume,
            part_events=self.segment_events,
            commit_part=commit_part,
        )
        ctx.result.streamed_events += segment.streamed
        return segment

    def _table(self, ctx: _Chunking, spec: SnapshotTable, state: SnapshotState) -> None:  # noqa: PLR0915 (one chunk's steps, in order)
        """Chunks of one table until it is done, ended, or a stop is requested."""
        conn, result = ctx.conn, ctx.result
        gone = f"table {spec.name} does not exist (dropped or renamed during its snapshot)"
        try:
            estimated = estimated_rows(conn, spec)
        except pymysql.MySQLError as exc:
            if not is_missing_table(exc):
                raise
            self._end(state, spec.name, gone, result)
            return
        tally = SnapshotProgress.of_table(state, spec.name, estimated)
        if not spec.primary_key:
            self._copy_whole(ctx, spec, state, tally)
            return
        while not self._stop.is_set():
            self._interrupt.check()
            began = self._clock()
            chunk, asked = self._read(conn, spec, state.after, self.sizer.rows)
            if chunk is None:
                # Nothing of the segment was read: the DROP lands with the next table's chunks.
                self._end(state, spec.name, gone, result)
                break
            # The high watermark, on the chunk's own connection right after its SELECT.
            high = binlog_end(conn)
            read = self._segment(ctx, spec, {pk for pk, _ in chunk.rows}, high)
            kept = [(pk, image) for pk, image in chunk.rows if pk not in read.touched]
            done = len(chunk.rows) < asked
            next_index, next_after = (
                (state.index + 1, None) if done else (state.index, encode_key(chunk.last_key or []))
            )
            counted = len(chunk.rows)
            ended: str | None = None
            if read.altered:
                # The table changed shape inside the segment: the chunk may have been read
                # with either schema. Commit the segment alone and read the chunk again
                # (or end the table if it cannot be copied any more).
                kept, counted = [], 0
                spec, ended = self._reshaped(conn, spec)
                done = ended is not None
                next_index, next_after = (
                    (state.index + 1, None) if done else (state.index, state.after)
                )
            events = list(read.events)
            if done and not chunk.rows and tally.chunks == 0 and not read.altered:  # empty
                events.append(definition_event(conn, spec, read.cut))
            rows = RowsAtCut(
                spec.db,
                spec.table,
                spec.columns_json,
                read.cut.binlog_position,
                int(time.time()),
                [pk for pk, _ in kept],
                [image for _, image in kept],
            )
            ctx.batch_seq += 1
            pending = PendingChunk.new(ctx.batch_seq, next_index, next_after)
            state.pending = pending
            self._save_state(state)
            self._commit(ctx, events, read.cut, rows, pending.chunk)
            if ended is not None:
                log.warning("%s: ending the snapshot of %s: %s", self.name, spec.name, ended)
                state.ended[spec.name] = ended
                result.ended[spec.name] = ended
            state.progress[spec.name] = TableCounts(
                tally.rows_read + counted, tally.estimated_rows, tally.chunks + 1
            )
            state.advance(next_index, next_after)
            self._save_state(state)
            self.sizer.observe(asked, len(chunk.rows), self._clock() - began)
            tally.chunk_rows = len(chunk.rows)
            table_index = state.index if not done else state.index - 1
            self._account(ctx, tally, table_index, counted=counted, kept=len(kept))
            log.debug(
                "%s: %s chunk %d: high %s cut %s, %d rows, %d dropped",
                self.name,
                spec.name,
                tally.chunks,
                high,
                read.cut,
                counted,
                counted - len(kept),
            )
            if done:
                if self._on_table_done is not None:
                    self._on_table_done(spec.name, ended)
                break

    def _copy_whole(
        self, ctx: _Chunking, spec: SnapshotTable, state: SnapshotState, tally: SnapshotProgress
    ) -> None:
        """A table without a primary key, copied in one consistent read (:mod:`.whole_copy`);
        an interrupted copy starts over (its truncate row replaces the partial one)."""

        def commit(
            events: Sequence[ChangeEvent], cut: ResumePosition, rows: RowsAtCut | None
        ) -> None:
            ctx.batch_seq += 1
            self._commit(ctx, list(events), cut, rows)

        def segment(high: BinlogPosition) -> tuple[list[ChangeEvent], ResumePosition, bool]:
            read = self._segment(ctx, spec, set(), high)
            return read.events, read.cut, read.altered

        try:
            copied = copy_whole_table(
                self._source, spec, read_segment=segment, commit=commit, batch_rows=self.sizer.rows
            )
        except pymysql.MySQLError as exc:
            if not is_missing_table(exc):
                raise
            self._end(state, spec.name, f"table {spec.name} does not exist any more", ctx.result)
            return
        finally:
            self._interrupt.attach(ctx.conn)  # the copy's own connection is closed
        state.progress[spec.name] = TableCounts(copied, tally.estimated_rows, 1)
        state.advance(state.index + 1, None)
        self._save_state(state)
        tally.chunk_rows = copied
        self._account(ctx, tally, state.index - 1, counted=copied, kept=copied)
        if self._on_table_done is not None:
            self._on_table_done(spec.name, None)

    def _reshaped(
        self, conn: pymysql.connections.Connection[Any], spec: SnapshotTable
    ) -> tuple[SnapshotTable, str | None]:
        """The table's new shape after a DDL, or why it cannot be copied any more."""
        log.info("%s: %s changed by DDL during a chunk; reading it again", self.name, spec.name)
        try:
            return describe_table(conn, spec.db, spec.table), None
        except SnapshotError as exc:  # dropped, renamed, key removed
            return spec, str(exc)

    def _read(
        self, conn: pymysql.connections.Connection[Any], spec: SnapshotTable, after: Any, rows: int
    ) -> tuple[ChunkRows | None, int]:
        """The next chunk of at most ``rows`` rows and ``snapshot.chunk_bytes`` bytes (fewer
        rows than asked: the table ended), and the rows asked; None when the table no longer
        exists."""
        key = None if after is None else decode_key(after)
        try:
            asked = rows_within(conn, spec, key, rows, self.config.snapshot.chunk_bytes)
            return read_chunk(conn, spec, key, asked), asked
        except SourceTableMissingError:
            return None, rows
        except pymysql.MySQLError as exc:
            if not is_missing_table(exc):
                raise
            return None, rows

    def _account(
        self, ctx: _Chunking, tally: SnapshotProgress, table_index: int, *, counted: int, kept: int
    ) -> None:
        """Add one committed chunk to the table's tally and the result; report progress."""
        result = ctx.result
        tally.chunks += 1
        tally.rows_read += counted
        tally.rows_written += kept
        tally.rows_dropped += counted - kept
        tally.batch_seq = ctx.batch_seq
        tally.table_index = table_index
        tally.seconds = time.perf_counter() - ctx.started
        result.chunks += 1
        result.rows_written += kept
        result.rows_dropped += counted - kept
        result.per_table[tally.table] = result.per_table.get(tally.table, 0) + kept
        if self._on_progress is not None:
            self._on_progress(replace(tally))


@dataclass(slots=True)
class _Chunking:
    """What every chunk of one run shares, and where the run stands (last batch, cut)."""

    conn: pymysql.connections.Connection[Any]
    probe: BinlogSource
    stream: SegmentStream
    tail: SegmentTail
    """The newest events before the cut (see :class:`SegmentTail`)."""
    sink: DeltaChangeLog
    epoch: int
    result: SnapshotResult
    started: float
    batch_seq: int
    resume: ResumePosition
