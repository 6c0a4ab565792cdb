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
normal run resumes from the change log's checkpoint, which now sits after the snapshot.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pymysql
from deltalake import DeltaTable
from pydantic import SecretStr

from cdc_platform.config.models import InstanceConfig
from cdc_platform.errors import CdcError, SnapshotError, SourceError
from cdc_platform.events import (
    BinlogPosition,
    ChangeEvent,
    EventKind,
    Op,
    ResumePosition,
    Transaction,
)
from cdc_platform.runtime.instance import CommitReport
from cdc_platform.sink.delta import Checkpoint, DeltaChangeLog, MaintenancePolicy
from cdc_platform.source.binlog import BinlogSource
from cdc_platform.source.connection import connect_source
from cdc_platform.source.snapshot import (
    SnapshotTable,
    base_tables,
    decode_key,
    describe_table,
    encode_key,
    read_chunk,
)
from cdc_platform.source.values import dumps

__all__ = [
    "SegmentStream",
    "SnapshotProgress",
    "SnapshotResult",
    "SnapshotRunner",
    "captured_tables_path",
    "events_at_cut",
    "snapshot_new_tables",
    "state_path",
    "touched_keys",
]

log = logging.getLogger(__name__)

STATE_VERSION = 1
_IDLE_CUT_SECONDS = 1.0
"""Cut the segment when the stream stays quiet this long before reaching the high watermark
(e.g. the binlog rotated after the last transaction). Safe: see the module docstring."""
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


class SegmentStream:
    """The binlog from the checkpoint on, read by a thread into a queue."""

    def __init__(self, source: BinlogSource) -> None:
        self.source = source
        self.queue: queue.Queue[ChangeEvent | BaseException | None] = queue.Queue(maxsize=100_000)
        self._thread = threading.Thread(target=self._run, name="cdc-snapshot-binlog", daemon=True)
        self._held: ChangeEvent | None = None
        self._front: list[ChangeEvent] = []
        """Events handed back by an idle cut inside a transaction, in order."""
        self._thread.start()

    def _run(self) -> None:
        try:
            for event in self.source.events():
                self.queue.put(event)
        except BaseException as exc:  # handed to the main thread
            self.queue.put(exc)
            return
        self.queue.put(None)

    def until(
        self, high: BinlogPosition, cut: ResumePosition
    ) -> tuple[list[ChangeEvent], ResumePosition]:
        """Whole transactions from the last cut up to ``high`` (or until the stream idles),
        and the resume position after them."""
        segment: list[ChangeEvent] = []
        open_txn: list[ChangeEvent] = []
        resume = cut
        if not cut.binlog_position < high:
            return segment, resume
        while True:
            event = self._held
            self._held = None
            if event is None and self._front:
                event = self._front.pop(0)
            if event is None:
                try:
                    item = self.queue.get(timeout=_IDLE_CUT_SECONDS)
                except queue.Empty:
                    break
                if isinstance(item, BaseException):
                    if isinstance(item, CdcError):
                        raise item
                    raise SourceError(f"binlog stream failed: {item!r}") from item
                if item is None:
                    raise SourceError("binlog stream ended during the snapshot")
                event = item
            if not open_txn and event.txn.start >= high:
                self._held = event  # the first transaction after the high watermark
                break
            open_txn.append(event)
            if event.ends_transaction:
                segment.extend(open_txn)
                open_txn = []
                resume = event.resume_after()
                if event.position >= high:
                    break
        if open_txn:
            # Stopped inside a transaction (idle cut): keep it for the next segment.
            self._pushback(open_txn)
        return segment, resume

    def _pushback(self, events: list[ChangeEvent]) -> None:
        """Give an incomplete transaction back; it is read again first next time."""
        if self._held is not None:
            self._front.append(self._held)
            self._held = None
        self._front[:0] = events

    def stop(self) -> None:
        self.source.stop()
        self._thread.join(timeout=10)


def touched_keys(
    events: Sequence[ChangeEvent], db: str, table: str, key: Sequence[str]
) -> set[str]:
    """pk JSON of every row of ``db.table`` that an event changed, old keys included."""
    keys: set[str] = set()
    for event in events:
        if event.kind is not EventKind.ROW or event.db != db or event.table != table:
            continue
        if event.pk is not None:
            keys.add(event.pk)
        if event.before is not None:
            before = json.loads(event.before)
            keys.add(dumps({k: before.get(k) for k in key}))
    return keys


def _altered(events: Sequence[ChangeEvent], spec: SnapshotTable) -> bool:
    """Whether a DDL in ``events`` may concern the table (same db; same or unnamed table)."""
    return any(
        e.kind is EventKind.DDL and e.db == spec.db and e.table in (spec.table, "") for e in events
    )


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
        epoch: int | None = None,
        password: SecretStr | str | None = None,
        on_progress: Callable[[SnapshotProgress], None] | None = None,
        commit_gate: Callable[[], None] | None = None,
        maintenance: MaintenancePolicy | None = None,
        on_commit: Callable[[CommitReport], None] | None = None,
    ) -> None:
        if chunk_size < 1:
            raise ValueError(f"chunk_size must be >= 1, not {chunk_size}")
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
        self._epoch = epoch
        self._password = password
        self._on_progress = on_progress
        self._on_commit = on_commit
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

        Raises:
            SnapshotError: no primary key, unreadable column, another snapshot in progress.
            SourceError, SinkError: the source or the change log failed; rerun to continue.
        """
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
            specs = [describe_table(conn, *name.split(".", 1)) for name in state["tables"]]
            source_config = self.config.source.model_copy(
                update={"heartbeat_seconds": _SNAPSHOT_HEARTBEAT_SECONDS}
            )
            probe = BinlogSource(source_config, password=self._password_for_source())
            probe.check()
            resume = checkpoint.resume if checkpoint else probe.current_position()
            source = BinlogSource(
                source_config, resume=resume, password=self._password_for_source()
            )
            stream = SegmentStream(source)
            result = SnapshotResult(tables=list(state["tables"]), resumed=resumed)
            while state["index"] < len(specs) and not self._stop.is_set():
                spec = specs[state["index"]]
                batch_seq, resume = self._table(
                    conn,
                    probe,
                    stream,
                    sink,
                    spec,
                    state,
                    batch_seq,
                    resume,
                    epoch,
                    result,
                    started,
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

    def _table(  # noqa: PLR0917 - one chunk loop's whole context, private
        self,
        conn: pymysql.connections.Connection[Any],
        probe: BinlogSource,
        stream: SegmentStream,
        sink: DeltaChangeLog,
        spec: SnapshotTable,
        state: dict[str, Any],
        batch_seq: int,
        resume: ResumePosition,
        epoch: int,
        result: SnapshotResult,
        started: float,
    ) -> tuple[int, ResumePosition]:
        """Chunks of one table until it is done or a stop is requested."""
        with conn.cursor() as cur:
            cur.execute(f"SELECT COUNT(*) FROM `{spec.db}`.`{spec.table}`")  # noqa: S608
            row = cur.fetchone()
            estimated = int(row[0]) if row else 0
        chunks = rows_read = rows_written = rows_dropped = 0
        while not self._stop.is_set():
            after = state["after"]
            low = probe.current_position()
            chunk = read_chunk(
                conn, spec, None if after is None else decode_key(after), self.chunk_size
            )
            high = probe.current_position()
            segment, cut = stream.until(high.binlog_position, resume)
            touched = touched_keys(segment, spec.db, spec.table, spec.primary_key)
            kept = [(pk, image) for pk, image in chunk.rows if pk not in touched]
            done = len(chunk.rows) < self.chunk_size
            next_index, next_after = (
                (state["index"] + 1, None)
                if done
                else (state["index"], encode_key(chunk.last_key or []))
            )
            counted = len(chunk.rows)
            if _altered(segment, spec):
                # The table changed shape inside the segment: the chunk may have been read
                # with either schema. Commit the segment alone and read the chunk again.
                log.info(
                    "%s: %s changed by DDL during a chunk; reading it again", self.name, spec.name
                )
                spec = describe_table(conn, spec.db, spec.table)
                kept, done, counted = [], False, 0
                next_index, next_after = state["index"], state["after"]
            events = [*segment, *events_at_cut(spec, cut, kept)]
            batch_seq += 1
            state["pending"] = {"batch_seq": batch_seq, "index": next_index, "after": next_after}
            self._save_state(state)
            if self._gate is not None:
                self._gate()
            landed = sink.commit(events, batch_seq=batch_seq, resume=cut, epoch=epoch)
            if self._on_commit is not None:
                self._on_commit(
                    CommitReport.of_side_commit(
                        self.name, batch_seq, landed, events=len(events), resume=cut, epoch=epoch
                    )
                )
            state.update(index=next_index, after=next_after, pending=None)
            self._save_state(state)
            resume = cut
            chunks += 1
            rows_read += counted
            rows_written += len(kept)
            rows_dropped += counted - len(kept)
            result.chunks += 1
            result.rows_written += len(kept)
            result.rows_dropped += counted - len(kept)
            result.streamed_events += sum(1 for e in segment if e.kind is not EventKind.COMMIT)
            result.per_table[spec.name] = result.per_table.get(spec.name, 0) + len(kept)
            log.debug(
                "%s: %s chunk %d: low %s high %s cut %s, %d rows, %d dropped",
                self.name,
                spec.name,
                chunks,
                low,
                high,
                cut,
                len(chunk.rows),
                len(chunk.rows) - len(kept),
            )
            if self._on_progress is not None:
                self._on_progress(
                    SnapshotProgress(
                        table=spec.name,
                        table_index=state["index"] if not done else state["index"] - 1,
                        tables=len(state["tables"]),
                        chunks=chunks,
                        rows_read=rows_read,
                        rows_written=rows_written,
                        rows_dropped=rows_dropped,
                        estimated_rows=estimated,
                        batch_seq=batch_seq,
                        seconds=time.perf_counter() - started,
                    )
                )
            if done:
                break
        return batch_seq, resume


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


def _read_captured(path: Path) -> set[str] | None:
    try:
        return set(json.loads(path.read_text(encoding="utf-8"))["tables"])
    except FileNotFoundError:
        return None


def _write_captured(path: Path, tables: set[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"tables": sorted(tables)}), encoding="utf-8")
    os.replace(tmp, path)


def snapshot_new_tables(
    name: str,
    config: InstanceConfig,
    table_uri: str,
    lake_root: Path,
    *,
    epoch: int,
    commit_gate: Callable[[], None],
    password: SecretStr | None = None,
    maintenance: MaintenancePolicy | None = None,
    on_progress: Callable[[SnapshotProgress], None] | None = None,
    on_runner: Callable[[SnapshotRunner | None], None] | None = None,
    on_commit: Callable[[CommitReport], None] | None = None,
) -> SnapshotResult | None:
    """Snapshot what the destination does not have a copy of yet, under the caller's lease.

    ``<lake_root>/<name>/_captured_tables.json`` lists the tables already copied (or
    captured from their creation). First an interrupted snapshot is finished; then every base
    table the filters match that is not in the list is snapshotted (all of them at the first
    start), and added to the list once done. Tables without a primary key cannot be copied
    consistently: they are logged and listed, so they are not retried at each start (their
    changes are captured from the binlog all the same). ``on_runner`` receives the runner
    while it works (so a stop request can reach it) and None afterwards.

    Returns the last snapshot's result, or None when there was nothing to copy.
    """
    state_file = state_path(lake_root, name)
    record = captured_tables_path(lake_root, name)
    known = _read_captured(record)
    chunk_size = config.snapshot.chunk_size

    def runner(tables: Sequence[str] | None) -> SnapshotRunner:
        made = SnapshotRunner(
            name,
            config,
            table_uri,
            state_file,
            tables=tables,
            chunk_size=chunk_size,
            epoch=epoch,
            password=password,
            on_progress=on_progress,
            commit_gate=commit_gate,
            maintenance=maintenance,
            on_commit=on_commit,
        )
        if on_runner is not None:
            on_runner(made)
        return made

    result: SnapshotResult | None = None
    try:
        if state_file.exists():
            log.info("%s: finishing an interrupted snapshot", name)
            result = runner(None).run()
            if state_file.exists():
                return result  # stopped: finished at the next start
            known = (known or set()) | set(result.tables)
            _write_captured(record, known)
        probe = runner([])
        current = probe.captured_tables()
        new = sorted(set(current) - (known or set()))
        if not new:
            if known is None:
                _write_captured(record, set())
            return result
        refused = probe.keyless(new)
        for table, why in refused.items():
            log.warning("%s: not snapshotting %s: %s", name, table, why)
        copy = [t for t in new if t not in refused]
        if copy:
            log.info("%s: snapshotting %d new table(s): %s", name, len(copy), ", ".join(copy))
            result = runner(copy).run()
            if state_file.exists():
                return result  # stopped: finished at the next start
        _write_captured(record, (known or set()) | set(new))
        return result
    finally:
        if on_runner is not None:
            on_runner(None)
