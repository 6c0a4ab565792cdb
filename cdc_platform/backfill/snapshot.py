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

The runner keeps the tables, the state file and the resume; each table is copied by
:class:`~.table_copy.TableCopy` (the chunk loop, where the next chunk's read runs ahead of
the commit). The runner writes under its caller's
:class:`~cdc_platform.sink.term.WriteTerm` (the lease's epoch and commit gate). The gate only
runs before commits, so a
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
from collections.abc import Iterator, Sequence
from typing import Any

import pymysql

from cdc_platform.backfill.chunk_sizing import ChunkSizer
from cdc_platform.backfill.progress import SnapshotObservers, SnapshotProgress, SnapshotResult
from cdc_platform.backfill.segments import SegmentReader, SegmentStream, SegmentTail
from cdc_platform.backfill.stop import SideWorkStop
from cdc_platform.backfill.table_copy import CopyHooks, CopyRun, TableCopy
from cdc_platform.config.instance import SnapshotSettings
from cdc_platform.errors import CdcError, SnapshotError
from cdc_platform.sink import DeltaChangeLog
from cdc_platform.sink.lake_files import LakeFile
from cdc_platform.sink.snapshot_state import PendingChunk, SnapshotState
from cdc_platform.sink.term import WriteTerm
from cdc_platform.source.filters import TableFilter
from cdc_platform.source.mysql import connect_source
from cdc_platform.source.mysql_errors import mysql_error
from cdc_platform.source.reading.table_description import SnapshotTable, describe_table
from cdc_platform.source.reading.table_listing import base_tables
from cdc_platform.source.stream.binlog import BinlogSource
from cdc_platform.source.table_names import captured_split, choose_split

__all__ = [
    "SnapshotProgress",
    "SnapshotResult",
    "SnapshotRunner",
]

log = logging.getLogger(__name__)

_SNAPSHOT_HEARTBEAT_SECONDS = 0.25
"""Short server heartbeat, so a held-back quiet COMMIT reaches the cut without delay, and a
segment's end past the last transaction is known to be reached (``Transaction.read_to``)."""


class SnapshotRunner:
    """Snapshots tables of one destination into its change log; see the module docstring.

    ``term`` says who writes (its epoch: the lease's, None: the checkpoint's; its gate runs
    before each commit); ``stop`` (see :class:`SideWorkStop`) interrupts a run at once.
    ``settings`` (default: the destination's ``snapshot`` settings) size the steps: a
    ``chunk_size`` fixes the rows per chunk; without it each chunk's rows adapt so that a
    chunk takes about ``chunk_seconds`` (:mod:`.chunk_sizing`; the observers' ``clock``
    times them).
    """

    def __init__(  # noqa: PLR0913 (the term, the state file; what to copy, how, who hears and who stops it: keyword-only)
        self,
        term: WriteTerm,
        state_file: LakeFile | str | os.PathLike[str],
        *,
        tables: Sequence[str] | None = None,
        settings: SnapshotSettings | None = None,
        observers: SnapshotObservers | None = None,
        stop: SideWorkStop | None = None,
    ) -> None:
        name, config = term.destination, term.config
        settings = config.snapshot if settings is None else settings
        sizer = ChunkSizer.for_settings(settings.chunk_size, settings.chunk_seconds)
        if config.source.mode != "binlog":
            raise SnapshotError(
                f"{name}: the snapshot merges chunks with the binlog; a destination in the "
                f"{config.source.mode} source mode copies existing rows itself (docs/id_watch.md)"
            )
        self.term = term
        self.name = name
        self.config = config
        self.state_file = (
            state_file
            if isinstance(state_file, LakeFile)
            else LakeFile(os.fspath(state_file), term.layout.storage_options)
        )
        self.requested = list(tables) if tables else None
        self.settings = settings
        self.sizer = sizer
        self.segment_events = settings.segment_events
        self._observers = observers or SnapshotObservers()
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
            for name in self.requested:
                choose_split(name, ())  # `db.table` at all; resolved and checked when described
            return list(self.requested)
        return base_tables(conn, source.include_tables, source.exclude_tables)

    def _resolved(self, conn: pymysql.connections.Connection[Any], name: str) -> tuple[str, str]:
        """The table ``name`` means on the server, if the destination's filters capture it
        (a requested table, a resumed snapshot's table after a filter change)."""
        source = self.config.source
        captured = TableFilter(source.include_tables, source.exclude_tables).matches
        return captured_split(conn, name, captured)

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
                    describe_table(conn, *self._resolved(conn, name), require_key=False)
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
            source = BinlogSource(  # heartbeats: where a whole copy's place is read to
                source_config, resume=resume, password=self.term.password, heartbeats=True
            )
            stream = SegmentStream(source, read_ahead=self.segment_events)
            result = SnapshotResult(tables=list(state.tables), resumed=resumed)
            segments = SegmentReader(stream, SegmentTail(self.segment_events), self.segment_events)
            run = CopyRun(conn, probe, segments, sink, epoch, result, started, batch_seq, resume)
            copy = self._table_copy()
            while state.index < len(specs) and not self._stop.is_set():
                spec = specs[state.index]
                if isinstance(spec, str):
                    self._end(state, state.tables[state.index], spec, result)
                    continue
                copy.copy(run, spec, state)
            result.last_batch_seq = run.batch_seq
            result.resume = run.resume
            result.seconds = time.perf_counter() - started
            if state.index >= len(specs):
                self.state_file.delete()
            return result
        finally:
            if stream is not None:
                stream.stop()
            sink.close()

    def _table_copy(self) -> TableCopy:
        hooks = CopyHooks(
            save_state=self._save_state,
            end_table=self._end,
            open_source=self._source,
            observers=self._observers,
        )
        return TableCopy(
            term=self.term,
            sizer=self.sizer,
            chunk_bytes=self.settings.chunk_bytes,
            interrupt=self._interrupt,
            stop=self._stop,
            hooks=hooks,
        )

    def _describe(
        self, conn: pymysql.connections.Connection[Any], name: str, *, pending: bool
    ) -> SnapshotTable | str:
        """The table's spec; for a snapshot already under way, why it cannot go on instead
        of an error (a fresh request for a table that cannot be copied is refused)."""
        try:
            return describe_table(conn, *self._resolved(conn, name), require_key=False)
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
        if self._observers.on_table_done is not None:
            self._observers.on_table_done(name, reason)

    def _landed(self, sink: DeltaChangeLog, pending: PendingChunk) -> bool:
        """Whether the interrupted chunk's commit is in the change log.

        Only the chunk's own mark counts (app transaction ``<destination>#chunk``, kept by
        log cleanup): another writer (a repair, a normal run started in between) may have
        committed the same batch number, even with `r` rows of the same table. Without a mark
        (a state written before marks) the chunk is read again, which is always safe (its `r`
        rows land later, with the newer state); skipping it would lose rows.
        """
        return pending.chunk is not None and sink.chunk_mark() == pending.chunk
