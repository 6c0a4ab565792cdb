"""Copying one table into the change log chunk by chunk, merged with the binlog.

The steps of each chunk (see :mod:`.snapshot` for why the result is exact): read the next
primary-key chunk (at most ``snapshot.chunk_bytes`` of values), take the high watermark on
the same connection, read the binlog segment up to it (committing full parts of a long one
on the way), drop the chunk's rows whose keys the segment or the previous segment's tail
touched, write the next position to the state file as pending, commit the segment and the
remaining rows as op ``r`` in one Delta commit, and confirm the position. A table without a
primary key is copied whole instead (:mod:`.whole_copy`).

The next chunk's SELECT runs ahead (:mod:`.read_ahead`) while a chunk commits. It starts
after the chunk's segment was read, and its high watermark is taken when its rows are taken,
so that SELECT runs after the chunk's cut and before its own high watermark: inside its own
segment, as the merge requires (a later high watermark only makes the segment longer: more
of the chunk's keys are dropped and represented by their events). Taking the watermark when
the read ended would make the stream's changes wait one chunk longer. A stop, the table's
end or a DDL in the segment start none; the one running is waited for and dropped when the
loop ends (the connection is the run's).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

import pymysql

from cdc_platform.backfill.chunk_bytes import rows_within
from cdc_platform.backfill.chunk_sizing import ChunkSizer
from cdc_platform.backfill.commit import PendingCommit
from cdc_platform.backfill.progress import SnapshotObservers, SnapshotProgress, SnapshotResult
from cdc_platform.backfill.read_ahead import ReadAhead
from cdc_platform.backfill.segments import ChunkSegment, SegmentReader, altered
from cdc_platform.backfill.stop import SideWorkStop
from cdc_platform.backfill.table_definition import definition_event
from cdc_platform.backfill.whole_copy import copy_whole_table
from cdc_platform.errors import SnapshotError, SourceTableMissingError
from cdc_platform.events import BinlogPosition, ChangeEvent, EventKind, ResumePosition
from cdc_platform.sink import DeltaChangeLog
from cdc_platform.sink.schema import RowsAtCut
from cdc_platform.sink.snapshot_state import PendingChunk, SnapshotState, TableCounts
from cdc_platform.sink.spilled_rows import SnapshotRows
from cdc_platform.sink.term import WriteTerm
from cdc_platform.source.binlog_server import binlog_end
from cdc_platform.source.mysql_errors import is_missing_table
from cdc_platform.source.reading.row_keys import decode_key, encode_key
from cdc_platform.source.reading.row_reader import ChunkRows, estimated_rows, read_chunk
from cdc_platform.source.reading.table_description import SnapshotTable, describe_table
from cdc_platform.source.stream.binlog import BinlogSource

__all__ = ["CopyHooks", "CopyRun", "TableCopy"]

log = logging.getLogger(__name__)

_ChunkRead = tuple[ChunkRows | None, int]
"""A chunk (None: the table is gone) and the rows asked."""


@dataclass(frozen=True, slots=True)
class CopyHooks:
    """What the snapshot runner lends its table copies: the state file, how a table ends,
    its observers, and new source connections (a whole copy reads on its own)."""

    save_state: Callable[[SnapshotState], None]
    end_table: Callable[[SnapshotState, str, str, SnapshotResult], None]
    open_source: Callable[[], AbstractContextManager[pymysql.connections.Connection[Any]]]
    observers: SnapshotObservers


class TableCopy:
    """Copies tables of one snapshot run, one at a time (:meth:`copy`); see the module
    docstring. ``stop`` ends a table after its current chunk; ``interrupt`` ends it at once."""

    def __init__(  # noqa: PLR0913 (what one run's copies share, keyword-only)
        self,
        *,
        term: WriteTerm,
        sizer: ChunkSizer,
        chunk_bytes: int,
        interrupt: SideWorkStop,
        stop: threading.Event,
        hooks: CopyHooks,
    ) -> None:
        self.term = term
        self.name = term.destination
        self.sizer = sizer
        self.chunk_bytes = chunk_bytes
        self._interrupt = interrupt
        self._stop = stop
        self._hooks = hooks

    def _commit(
        self,
        run: CopyRun,
        events: list[ChangeEvent],
        cut: ResumePosition,
        rows: SnapshotRows | None = None,
        chunk: int | None = None,
    ) -> None:
        """Commit batch ``run.batch_seq`` (``events``, then a chunk's ``rows`` as op ``r``,
        marked ``chunk``) under the stop and the one commit protocol; the run resumes after
        ``cut`` from then on."""
        self._interrupt.check()
        PendingCommit(
            self.term,
            run.sink,
            events,
            batch_seq=run.batch_seq,
            resume=cut,
            epoch=run.epoch,
            snapshot=rows,
            chunk=chunk,
        ).commit_beside()
        run.resume = cut

    def _segment(
        self, run: CopyRun, spec: SnapshotTable, chunk_keys: set[str], high: BinlogPosition
    ) -> ChunkSegment:
        """Read the chunk's segment up to ``high``, committing full parts of it on the way
        (:meth:`~.segments.SegmentReader.chunk_segment`)."""

        def commit_part(part: list[ChangeEvent], cut: ResumePosition) -> None:
            run.batch_seq += 1
            self._commit(run, part, cut)

        segment = run.segments.chunk_segment(
            spec, chunk_keys, high=high, cut=run.resume, commit_part=commit_part
        )
        run.result.streamed_events += segment.streamed
        return segment

    def copy(self, run: CopyRun, spec: SnapshotTable, state: SnapshotState) -> None:
        """Chunks of one table until it is done, ended, or a stop is requested."""
        conn, result = run.conn, run.result
        gone = f"table {spec.name} does not exist (dropped or renamed during its snapshot)"
        try:
            estimated = estimated_rows(conn, spec)
        except pymysql.MySQLError as exc:
            if not is_missing_table(exc):
                raise
            self._hooks.end_table(state, spec.name, gone, result)
            return
        tally = SnapshotProgress.of_table(state, spec.name, estimated)
        if not spec.primary_key:
            self._copy_whole(run, spec, state, tally)
            return
        ahead: ReadAhead[_ChunkRead] = ReadAhead()
        try:
            self._chunks(run, spec, state, tally, ahead)
        finally:
            ahead.close()

    def _chunks(
        self,
        run: CopyRun,
        spec: SnapshotTable,
        state: SnapshotState,
        tally: SnapshotProgress,
        ahead: ReadAhead[_ChunkRead],
    ) -> None:
        """The chunk loop of :meth:`copy`: while chunk N is committed, chunk N+1 is read."""
        conn, result = run.conn, run.result
        gone = f"table {spec.name} does not exist (dropped or renamed during its snapshot)"
        times = _ChunkTimes(self.sizer, self._hooks.observers.clock)
        while not self._stop.is_set():
            self._interrupt.check()
            chunk, asked = ahead.take() or self._read(conn, spec, state.after, self.sizer.rows)
            if chunk is None:
                # Nothing of the segment was read: the DROP lands with the next table's chunks.
                self._hooks.end_table(state, spec.name, gone, result)
                break
            # The high watermark, on the chunk's own connection after its SELECT: taken now,
            # not when a read ahead ended, so the stream's changes since wait no longer.
            read = self._segment(run, spec, set(chunk.pks), binlog_end(conn))
            kept = _untouched(chunk, read.touched)
            done = len(chunk) < asked
            next_index, next_after = (
                (state.index + 1, None) if done else (state.index, encode_key(chunk.last_key or []))
            )
            counted = len(chunk)
            ended: str | None = None
            if read.altered:
                # The table changed shape inside the segment: the chunk may have been read
                # with either schema. Commit the segment alone and read the chunk again
                # (or end the table if it cannot be copied any more).
                kept, counted = ([], []), 0
                spec, ended = self._reshaped(conn, spec)
                done = ended is not None
                next_index, next_after = (
                    (state.index + 1, None) if done else (state.index, state.after)
                )
            events = list(read.events)
            if done and not chunk and tally.chunks == 0 and not read.altered:  # empty
                events.append(definition_event(conn, spec, read.cut))
            rows = _rows_at_cut(spec, read.cut, kept)
            if not done and not read.altered and not self._stop.is_set():
                # The next chunk's SELECT runs while this one commits: it starts after this
                # chunk's segment was read, so it lies inside the next segment, as it must.
                times.read_ahead(asked, len(chunk))
                ahead.start(partial(self._read, conn, spec, next_after, self.sizer.rows))
            run.batch_seq += 1
            pending = PendingChunk.new(run.batch_seq, next_index, next_after)
            state.pending = pending
            self._hooks.save_state(state)
            self._commit(run, events, read.cut, rows, pending.chunk)
            if ended is not None:
                log.warning("%s: ending the snapshot of %s: %s", self.name, spec.name, ended)
                state.ended[spec.name] = ended
                result.ended[spec.name] = ended
            state.progress[spec.name] = TableCounts(
                tally.rows_read + counted, tally.estimated_rows, tally.chunks + 1
            )
            state.advance(next_index, next_after)
            self._hooks.save_state(state)
            times.done(asked, len(chunk))
            tally.chunk_rows = len(chunk)
            table_index = state.index if not done else state.index - 1
            self._account(run, tally, table_index, counted=counted, kept=len(kept[0]))
            log.debug(
                "%s: %s chunk %d: cut %s, %d rows, %d dropped",
                self.name,
                spec.name,
                tally.chunks,
                read.cut,
                counted,
                counted - len(kept[0]),
            )
            if done:
                if self._hooks.observers.on_table_done is not None:
                    self._hooks.observers.on_table_done(spec.name, ended)
                break

    def _copy_whole(
        self, run: CopyRun, spec: SnapshotTable, state: SnapshotState, tally: SnapshotProgress
    ) -> None:
        """A table without a primary key, copied in one consistent read (:mod:`.whole_copy`);
        an interrupted copy starts over (its truncate row replaces the partial one)."""

        def commit(
            events: Sequence[ChangeEvent], cut: ResumePosition, rows: SnapshotRows | None
        ) -> None:
            run.batch_seq += 1
            self._commit(run, list(events), cut, rows)

        def segment(high: BinlogPosition) -> tuple[list[ChangeEvent], ResumePosition, bool]:
            """The binlog up to the copy's place, exactly: no idle cut (the rows count)."""
            changed = False
            while True:
                self._interrupt.check()
                segments = run.segments
                part, cut, reached = segments.stream.part(
                    high, run.resume, segments.part_events, exact=True
                )
                segments.tail.extend(part)
                changed = changed or altered(part, spec)
                run.result.streamed_events += sum(e.kind is not EventKind.COMMIT for e in part)
                if reached:
                    return part, cut, changed
                if part:
                    commit(part, cut, None)

        try:
            copied = copy_whole_table(
                self._hooks.open_source,
                spec,
                read_segment=segment,
                commit=commit,
                batch_rows=self.sizer.rows,
            )
        except pymysql.MySQLError as exc:
            if not is_missing_table(exc):
                raise
            self._hooks.end_table(
                state, spec.name, f"table {spec.name} does not exist any more", run.result
            )
            return
        finally:
            self._interrupt.attach(run.conn)  # the copy's own connection is closed
        state.progress[spec.name] = TableCounts(copied, tally.estimated_rows, 1)
        state.advance(state.index + 1, None)
        self._hooks.save_state(state)
        tally.chunk_rows = copied
        self._account(run, tally, state.index - 1, counted=copied, kept=copied)
        if self._hooks.observers.on_table_done is not None:
            self._hooks.observers.on_table_done(spec.name, None)

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
            asked = rows_within(conn, spec, key, rows, self.chunk_bytes)
            return read_chunk(conn, spec, key, asked), asked
        except SourceTableMissingError:
            return None, rows
        except pymysql.MySQLError as exc:
            if not is_missing_table(exc):
                raise
            return None, rows

    def _account(
        self, run: CopyRun, tally: SnapshotProgress, table_index: int, *, counted: int, kept: int
    ) -> None:
        """Add one committed chunk to the table's tally and the result; report progress."""
        result = run.result
        tally.chunks += 1
        tally.rows_read += counted
        tally.rows_written += kept
        tally.rows_dropped += counted - kept
        tally.batch_seq = run.batch_seq
        tally.table_index = table_index
        tally.seconds = time.perf_counter() - run.started
        result.chunks += 1
        result.rows_written += kept
        result.rows_dropped += counted - kept
        result.per_table[tally.table] = result.per_table.get(tally.table, 0) + kept
        if self._hooks.observers.on_progress is not None:
            self._hooks.observers.on_progress(replace(tally))


def _untouched(chunk: ChunkRows, touched: set[str]) -> tuple[list[str], list[str]]:
    """The chunk's (pks, images) without the rows whose key the segment ``touched``."""
    if not touched:
        return chunk.pks, chunk.images
    kept = [i for i, pk in enumerate(chunk.pks) if pk not in touched]
    return [chunk.pks[i] for i in kept], [chunk.images[i] for i in kept]


def _rows_at_cut(
    spec: SnapshotTable, cut: ResumePosition, kept: tuple[Sequence[str], Sequence[str]]
) -> RowsAtCut:
    """A chunk's remaining (pks, images) as the sink takes them, at the segment's cut."""
    pks, images = kept
    return RowsAtCut(
        spec.db,
        spec.table,
        spec.columns_json,
        cut.binlog_position,
        int(time.time()),
        pks,
        images,
    )


class _ChunkTimes:
    """Each chunk's time for the sizer: from the end of the last chunk to its own end.

    The next chunk's size is decided when its read starts ahead (:meth:`read_ahead`),
    before this chunk commits: its commit is counted as long as the last chunk's took.
    Without a read ahead the chunk is observed at its end (:meth:`done`).
    """

    def __init__(self, sizer: ChunkSizer, clock: Callable[[], float]) -> None:
        self._sizer = sizer
        self._clock = clock
        self._began = clock()
        self._split: float | None = None
        self._commit = 0.0

    def read_ahead(self, asked: int, rows: int) -> None:
        """The chunk is read and merged; its commit follows (as long as the last one's)."""
        self._split = self._clock()
        self._sizer.observe(asked, rows, self._split - self._began + self._commit)

    def done(self, asked: int, rows: int) -> None:
        """The chunk is committed."""
        now = self._clock()
        if self._split is None:
            self._sizer.observe(asked, rows, now - self._began)
        else:
            self._commit = now - self._split
        self._began, self._split = now, None


@dataclass(slots=True)
class CopyRun:
    """What every table of one snapshot run shares, and where the run stands (last batch, cut)."""

    conn: pymysql.connections.Connection[Any]
    probe: BinlogSource
    segments: SegmentReader
    """The binlog stream, the tail before the cut, the part size."""
    sink: DeltaChangeLog
    epoch: int
    result: SnapshotResult
    started: float
    batch_seq: int
    resume: ResumePosition
