"""A consistent snapshot of existing rows into a destination's change log, without locks.

The watermark method of DBLog / Debezium's incremental snapshot, run as its own step while
the destination's normal run is stopped (the CLI holds the destination's lease). This step
is the only writer: it streams the binlog from the change log's checkpoint itself and, for
each primary-key chunk of a table,

1. takes the low watermark (the server's binlog end),
2. SELECTs the chunk (one autocommit read, no lock),
3. takes the high watermark,
4. reads the binlog on to the high watermark (the *segment*: every event since the previous
   cut, whole transactions only),
5. drops from the chunk every row whose key any event of the segment touched (the segment
   carries that key's newer, or equal, state), and
6. commits the segment's events followed by the remaining rows as op ``r``, with the
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
transactions already in the binlog but not yet visible to InnoDB when the SELECT ran.

Progress lives in a small JSON file next to the change log, written before each commit as
*pending* and confirmed after it; on restart a pending chunk whose batch is in the change
log counts as done, otherwise it is read again. So a kill -9 costs at most one chunk and
never duplicates or loses a change. Once every table is done the file is removed and the
normal run resumes from the change log's checkpoint, which now sits after the snapshot. A
table that cannot be copied any more (dropped, renamed, its key removed) ends with a reason in
the file and the result instead of failing every rerun.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pymysql
from deltalake import DeltaTable
from pydantic import SecretStr

from cdc_platform.config.models import InstanceConfig
from cdc_platform.errors import SnapshotError
from cdc_platform.events import (
    BinlogPosition,
    ChangeEvent,
    EventKind,
    Op,
    ResumePosition,
    Transaction,
)
from cdc_platform.runtime.instance import CommitReport
from cdc_platform.runtime.segments import SegmentStream, altered, touched_keys
from cdc_platform.sink import Checkpoint, DeltaChangeLog, MaintenancePolicy
from cdc_platform.source.binlog import BinlogSource
from cdc_platform.source.mysql import connect_source, is_missing_table, mysql_error
from cdc_platform.source.snapshot import (
    ChunkRows,
    SnapshotTable,
    base_tables,
    decode_key,
    describe_table,
    encode_key,
    read_chunk,
)
from cdc_platform.source.sql import qualified_name

__all__ = [
    "DEFAULT_SEGMENT_EVENTS",
    "SegmentStream",
    "SnapshotProgress",
    "SnapshotResult",
    "SnapshotRunner",
    "captured_tables_path",
    "events_at_cut",
    "state_path",
    "touched_keys",
]

log = logging.getLogger(__name__)

STATE_VERSION = 1
DEFAULT_SEGMENT_EVENTS = 20_000
"""Binlog events held at most per segment part (and read ahead): a longer segment is
committed in parts, at transaction boundaries."""
_SNAPSHOT_HEARTBEAT_SECONDS = 0.25
"""Short server heartbeat, so a held-back quiet COMMIT reaches the cut without delay."""


def state_path(lake_root: Path, destination: str) -> Path:
    """Where a destination's snapshot progress is kept (local lake roots only)."""
    return lake_root / destination / "_snapshot_state.json"


def captured_tables_path(lake_root: Path, destination: str) -> Path:
    """Where the tables a destination already has a copy of are recorded."""
    return lake_root / destination / "_captured_tables.json"


@dataclass
class SnapshotProgress:
    """Reported after every committed chunk (the CLI prints it; tests count chunks)."""

    table: str
    table_index: int
    tables: int
    chunks: int
    rows_read: int
    rows_written: int
    rows_dropped: int
    estimated_rows: int
    batch_seq: int
    seconds: float


@dataclass
class SnapshotResult:
    """What one run of the snapshot did."""

    tables: list[str]
    chunks: int = 0
    rows_written: int = 0
    rows_dropped: int = 0
    streamed_events: int = 0
    resumed: bool = False
    seconds: float = 0.0
    last_batch_seq: int = 0
    resume: ResumePosition | None = None
    per_table: dict[str, int] = field(default_factory=dict)
    ended: dict[str, str] = field(default_factory=dict)
    """Tables whose snapshot ended without copying them (dropped, renamed, no key), and why."""


class SnapshotRunner:
    """Snapshots tables of one destination into its change log; see the module docstring.

    ``epoch`` is the fencing token of the lease the caller holds (None: the checkpoint's);
    ``commit_gate`` is called before each commit and raises to forbid it (lease lost).
    """

    def __init__(
        self,
        name: str,
        config: InstanceConfig,
        table_uri: str,
        state_file: Path,
        *,
        tables: Sequence[str] | None = None,
        chunk_size: int = 2000,
        segment_events: int = DEFAULT_SEGMENT_EVENTS,
        epoch: int | None = None,
        password: SecretStr | str | None = None,
        on_progress: Callable[[SnapshotProgress], None] | None = None,
        commit_gate: Callable[[], None] | None = None,
        maintenance: MaintenancePolicy | None = None,
        on_commit: Callable[[CommitReport], None] | None = None,
        on_table_done: Callable[[str, str | None], None] | None = None,
    ) -> None:
        if chunk_size < 1:
            raise ValueError(f"chunk_size must be >= 1, not {chunk_size}")
        if segment_events < 1:
            raise ValueError(f"segment_events must be >= 1, not {segment_events}")
        if config.source.mode != "binlog":
            raise SnapshotError(
                f"{name}: the snapshot merges chunks with the binlog; a destination in the "
                f"{config.source.mode} source mode copies existing rows itself (docs/id_watch.md)"
            )
        self.name = name
        self.config = config
        self.table_uri = table_uri
        self.state_file = state_file
        self.requested = list(tables) if tables else None
        self.chunk_size = chunk_size
        self.segment_events = segment_events
        self._epoch = epoch
        self._password = password
        self._on_progress = on_progress
        self._on_commit = on_commit
        self._on_table_done = on_table_done
        self._gate = commit_gate
        self._maintenance = maintenance
        self._stop = threading.Event()

    def request_stop(self) -> None:
        """End after the current chunk (progress is kept; a rerun continues)."""
        self._stop.set()

    # -- state ---------------------------------------------------------------------------------

    def _load_state(self) -> dict[str, Any] | None:
        try:
            text = self.state_file.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        state: dict[str, Any] = json.loads(text)
        if state.get("v") != STATE_VERSION or state.get("destination") != self.name:
            raise SnapshotError(f"{self.state_file}: not a snapshot state of {self.name!r}")
        return state

    def _save_state(self, state: dict[str, Any]) -> None:
        self.state_file.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.state_file.with_suffix(".tmp")
        with tmp.open("w", encoding="utf-8") as handle:
            json.dump(state, handle, sort_keys=True)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, self.state_file)

    # -- run -----------------------------------------------------------------------------------

    def _connect(self) -> pymysql.connections.Connection[Any]:
        return connect_source(self.config.source, self._password, purpose="snapshot")

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
        conn = self._connect()
        try:
            return self._discover(conn)
        finally:
            conn.close()

    def keyless(self, tables: Sequence[str]) -> dict[str, str]:
        """Tables of ``tables`` the snapshot cannot copy, with why (no primary key...)."""
        conn = self._connect()
        refused: dict[str, str] = {}
        try:
            for name in tables:
                try:
                    describe_table(conn, *name.split(".", 1))
                except SnapshotError as exc:
                    refused[name] = str(exc)
        finally:
            conn.close()
        return refused

    def run(self) -> SnapshotResult:
        """Snapshot every requested table (or resume the one in progress) and return a summary.

        A table of a resumed snapshot that can no longer be copied (dropped, renamed, without
        a primary key now) ends with a logged reason in ``SnapshotResult.ended`` and the state;
        the other tables go on.

        Raises:
            SnapshotError: no primary key, unreadable column, another snapshot in progress.
            SourceError, SinkError: the source or the change log failed; rerun to continue.
        """
        try:
            return self._run()
        except pymysql.MySQLError as exc:
            raise mysql_error(exc, f"{self.name}: snapshot") from exc

    def _run(self) -> SnapshotResult:
        started = time.perf_counter()
        sink = DeltaChangeLog(
            self.table_uri, self.name, maintenance=self._maintenance or MaintenancePolicy()
        )
        conn = self._connect()
        stream: SegmentStream | None = None
        try:
            checkpoint = sink.recover()
            epoch = (
                self._epoch if self._epoch is not None else (checkpoint.epoch if checkpoint else 0)
            )
            batch_seq = checkpoint.batch_seq if checkpoint else 0
            state = self._load_state()
            resumed = state is not None
            if state is None:
                tables = self._discover(conn)
                state = {
                    "v": STATE_VERSION,
                    "destination": self.name,
                    "tables": tables,
                    "index": 0,
                    "after": None,
                    "pending": None,
                    "ended": {},
                }
            else:
                if self.requested and list(self.requested) != list(state["tables"]):
                    raise SnapshotError(
                        f"{self.name}: a snapshot of {', '.join(state['tables'])} is in progress "
                        f"({self.state_file}); run it to the end first (without --table, or with "
                        "the same tables), or delete that file to abandon it"
                    )
                pending = state.get("pending")
                if pending is not None:
                    if self._landed(checkpoint, int(pending["batch_seq"]), state):
                        state["index"], state["after"] = pending["index"], pending["after"]
                    state["pending"] = None
                log.info(
                    "%s: resuming the snapshot at table %d of %d after key %s",
                    self.name,
                    state["index"] + 1,
                    len(state["tables"]),
                    state["after"],
                )
            state.setdefault("ended", {})
            specs = [
                self._describe(conn, name, pending=resumed or i < state["index"])
                for i, name in enumerate(state["tables"])
            ]
            source_config = self.config.source.model_copy(
                update={"heartbeat_seconds": _SNAPSHOT_HEARTBEAT_SECONDS}
            )
            probe = BinlogSource(source_config, password=self._password_for_source())
            probe.check()
            resume = checkpoint.resume if checkpoint else probe.current_position()
            source = BinlogSource(
                source_config, resume=resume, password=self._password_for_source()
            )
            stream = SegmentStream(source, read_ahead=self.segment_events)
            result = SnapshotResult(tables=list(state["tables"]), resumed=resumed)
            while state["index"] < len(specs) and not self._stop.is_set():
                spec = specs[state["index"]]
                if isinstance(spec, str):
                    self._end(state, state["tables"][state["index"]], spec, result)
                    continue
                batch_seq, resume = self._table(
                    _Chunking(conn, probe, stream, sink, epoch, result, started),
                    spec,
                    state,
                    batch_seq,
                    resume,
                )
            result.last_batch_seq = batch_seq
            result.resume = resume
            result.seconds = time.perf_counter() - started
            if state["index"] >= len(specs):
                self.state_file.unlink(missing_ok=True)
            return result
        finally:
            if stream is not None:
                stream.stop()
            conn.close()
            sink.close()

    def _describe(
        self, conn: pymysql.connections.Connection[Any], name: str, *, pending: bool
    ) -> SnapshotTable | str:
        """The table's spec; for a snapshot already under way, why it cannot go on instead
        of an error (a fresh request for a table that cannot be copied is refused)."""
        try:
            return describe_table(conn, *name.split(".", 1))
        except SnapshotError as exc:
            if not pending:
                raise
            return str(exc)

    def _end(self, state: dict[str, Any], name: str, reason: str, result: SnapshotResult) -> None:
        """End one table's snapshot without copying the rest of it; the others go on."""
        log.warning("%s: ending the snapshot of %s: %s", self.name, name, reason)
        state["ended"][name] = reason
        state.update(index=state["index"] + 1, after=None, pending=None)
        self._save_state(state)
        result.ended[name] = reason
        if self._on_table_done is not None:
            self._on_table_done(name, reason)

    def _landed(self, checkpoint: Checkpoint | None, batch_seq: int, state: dict[str, Any]) -> bool:
        """Whether the interrupted chunk's commit is in the change log.

        Only a commit of that batch holding `r` rows of the table counts: another writer (a
        normal run started in between) may have used the same batch number. When in doubt
        the chunk is read again, which is always safe (its `r` rows land later, with the
        newer state); skipping it would lose rows.
        """
        if checkpoint is None or checkpoint.batch_seq < batch_seq:
            return False
        db, table = str(state["tables"][state["index"]]).split(".", 1)
        dataset = DeltaTable(self.table_uri).to_pyarrow_dataset()
        found = dataset.to_table(
            columns=["op"],
            filter=(pc.field("batch_seq") == batch_seq)
            & (pc.field("op") == "r")
            & (pc.field("db") == db)
            & (pc.field("table") == table),
        )
        return bool(found.num_rows > 0)

    def _password_for_source(self) -> SecretStr | None:
        if self._password is None:
            return None
        if isinstance(self._password, SecretStr):
            return self._password
        return SecretStr(self._password)

    def _commit(
        self,
        ctx: _Chunking,
        events: list[ChangeEvent],
        batch_seq: int,
        cut: ResumePosition,
    ) -> None:
        """One Delta commit under the gate, reported to ``on_commit``."""
        if self._gate is not None:
            self._gate()
        landed = ctx.sink.commit(events, batch_seq=batch_seq, resume=cut, epoch=ctx.epoch)
        if self._on_commit is not None:
            self._on_commit(
                CommitReport.of_side_commit(
                    self.name, batch_seq, landed, events=len(events), resume=cut, epoch=ctx.epoch
                )
            )

    def _segment(
        self,
        ctx: _Chunking,
        spec: SnapshotTable,
        *,
        chunk_keys: set[str],
        high: BinlogPosition,
        batch_seq: int,
        resume: ResumePosition,
    ) -> tuple[list[ChangeEvent], ResumePosition, set[str], bool, int]:
        """Read the segment up to ``high``, committing full parts of it on the way.

        Returns the last part and the cut after it, the chunk's keys the whole segment
        touched, whether a DDL may have changed the table, and the last batch committed.
        Committing a part early keeps it before the chunk's rows in ``seq`` order, as if it
        were in the chunk's commit, so the merge rule holds unchanged.
        """
        touched: set[str] = set()
        changed = False
        while True:
            part, cut, complete = ctx.stream.part(high, resume, self.segment_events)
            touched |= touched_keys(part, spec.db, spec.table, spec.primary_key) & chunk_keys
            changed = changed or altered(part, spec)
            ctx.result.streamed_events += sum(1 for e in part if e.kind is not EventKind.COMMIT)
            if complete:
                return part, cut, touched, changed, batch_seq
            batch_seq += 1
            self._commit(ctx, part, batch_seq, cut)
            resume = cut

    def _table(
        self,
        ctx: _Chunking,
        spec: SnapshotTable,
        state: dict[str, Any],
        batch_seq: int,
        resume: ResumePosition,
    ) -> tuple[int, ResumePosition]:
        """Chunks of one table until it is done, ended, or a stop is requested."""
        conn, result = ctx.conn, ctx.result
        gone = f"table {spec.name} does not exist (dropped or renamed during its snapshot)"
        try:
            estimated = _count(conn, spec)
        except pymysql.MySQLError as exc:
            if not is_missing_table(exc):
                raise
            self._end(state, spec.name, gone, result)
            return batch_seq, resume
        tally = SnapshotProgress(spec.name, state["index"], len(state["tables"]), *[0] * 7)
        tally.estimated_rows = estimated
        while not self._stop.is_set():
            low = ctx.probe.current_position()
            chunk = self._read(conn, spec, state["after"])
            if chunk is None:
                # Nothing of the segment was read: the DROP lands with the next table's chunks.
                self._end(state, spec.name, gone, result)
                break
            high = ctx.probe.current_position()
            segment, cut, touched, changed, batch_seq = self._segment(
                ctx,
                spec,
                chunk_keys={pk for pk, _ in chunk.rows},
                high=high.binlog_position,
                batch_seq=batch_seq,
                resume=resume,
            )
            kept = [(pk, image) for pk, image in chunk.rows if pk not in touched]
            done = len(chunk.rows) < self.chunk_size
            next_index, next_after = (
                (state["index"] + 1, None)
                if done
                else (state["index"], encode_key(chunk.last_key or []))
            )
            counted = len(chunk.rows)
            ended: str | None = None
            if changed:
                # The table changed shape inside the segment: the chunk may have been read
                # with either schema. Commit the segment alone and read the chunk again
                # (or end the table if it cannot be copied any more).
                kept, counted = [], 0
                spec, ended = self._reshaped(conn, spec)
                done = ended is not None
                next_index, next_after = (
                    (state["index"] + 1, None) if done else (state["index"], state["after"])
                )
            events = [*segment, *events_at_cut(spec, cut, kept)]
            batch_seq += 1
            state["pending"] = {"batch_seq": batch_seq, "index": next_index, "after": next_after}
            self._save_state(state)
            self._commit(ctx, events, batch_seq, cut)
            if ended is not None:
                log.warning("%s: ending the snapshot of %s: %s", self.name, spec.name, ended)
                state["ended"][spec.name] = ended
                result.ended[spec.name] = ended
            state.update(index=next_index, after=next_after, pending=None)
            self._save_state(state)
            resume = cut
            self._account(
                ctx, tally, state, counted=counted, kept=len(kept), batch_seq=batch_seq, done=done
            )
            log.debug(
                "%s: %s chunk %d: low %s high %s cut %s, %d rows, %d dropped",
                self.name,
                spec.name,
                tally.chunks,
                low,
                high,
                cut,
                counted,
                counted - len(kept),
            )
            if done:
                if self._on_table_done is not None:
                    self._on_table_done(spec.name, ended)
                break
        return batch_seq, resume

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
        self, conn: pymysql.connections.Connection[Any], spec: SnapshotTable, after: Any
    ) -> ChunkRows | None:
        """The next chunk, or None when the table no longer exists."""
        try:
            return read_chunk(
                conn, spec, None if after is None else decode_key(after), self.chunk_size
            )
        except pymysql.MySQLError as exc:
            if not is_missing_table(exc):
                raise
            return None

    def _account(
        self,
        ctx: _Chunking,
        tally: SnapshotProgress,
        state: dict[str, Any],
        *,
        counted: int,
        kept: int,
        batch_seq: int,
        done: bool,
    ) -> None:
        """Add one committed chunk to the table's tally and the result; report progress."""
        result = ctx.result
        tally.chunks += 1
        tally.rows_read += counted
        tally.rows_written += kept
        tally.rows_dropped += counted - kept
        tally.batch_seq = batch_seq
        tally.table_index = state["index"] if not done else state["index"] - 1
        tally.seconds = time.perf_counter() - ctx.started
        result.chunks += 1
        result.rows_written += kept
        result.rows_dropped += counted - kept
        result.per_table[tally.table] = result.per_table.get(tally.table, 0) + kept
        if self._on_progress is not None:
            self._on_progress(replace(tally))


@dataclass(frozen=True, slots=True)
class _Chunking:
    """What every chunk of one run shares."""

    conn: pymysql.connections.Connection[Any]
    probe: BinlogSource
    stream: SegmentStream
    sink: DeltaChangeLog
    epoch: int
    result: SnapshotResult
    started: float


def _count(conn: pymysql.connections.Connection[Any], spec: SnapshotTable) -> int:
    """The table's row count (for progress only)."""
    with conn.cursor() as cur:
        cur.execute(f"SELECT COUNT(*) FROM {qualified_name(spec.db, spec.table)}")  # noqa: S608
        row = cur.fetchone()
    return int(row[0]) if row else 0


def events_at_cut(
    spec: SnapshotTable,
    cut: ResumePosition,
    upserts: Sequence[tuple[str, str]],
    deletes: Sequence[str] = (),
) -> list[ChangeEvent]:
    """Rows read from the table, placed at the cut (their binlog columns say where they
    belong; server_id 0, no GTID): op ``r`` for (pk, image) pairs, then op ``d`` with
    ``before`` = the key for keys the table no longer has (reconciliation repairs)."""
    txn = Transaction(
        start=cut.binlog_position,
        gtid=None,
        gtid_set_before=cut.gtid_set,
        server_id=0,
        timestamp=int(time.time()),
    )
    position = cut.binlog_position
    rows: list[tuple[Op, str, str | None, str | None]] = [
        (Op.SNAPSHOT, pk, None, image) for pk, image in upserts
    ]
    rows += [(Op.DELETE, pk, pk, None) for pk in deletes]
    return [
        ChangeEvent(
            EventKind.ROW,
            txn,
            position,
            i,
            db=spec.db,
            table=spec.table,
            op=op,
            pk=pk,
            before=before,
            after=after,
            columns=spec.columns_json,
        )
        for i, (op, pk, before, after) in enumerate(rows)
    ]
