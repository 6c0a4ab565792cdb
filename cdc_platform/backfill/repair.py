"""Repair events for keys whose mirror row disagrees with the source, written under the lease.

The comparison (:mod:`cdc_platform.reconcile.compare`) only *suspects* keys; it reads a live
source and a mirror that lags the change log. What lands in the change log is decided here,
by the same watermark method the snapshot uses (:mod:`.segments`, :mod:`.snapshot`):
streaming the binlog from the change log's checkpoint, for each batch of suspected keys

1. low watermark, 2. ``SELECT`` the rows of those keys (no lock), 3. high watermark,
4. the binlog segment since the previous cut up to the high watermark (a long one, the backlog
   since the checkpoint, committed in parts of at most ``snapshot.segment_events`` events),
5. drop every key the segment, or the tail of the previous one, touched (its events carry
   the newer state; :class:`~.segments.SegmentTail` says why the tail), and
6. one Delta commit: the segment's events, then op ``r`` (the row as read) for each remaining
   key that exists and op ``d`` (``before`` = the key) for each remaining key that does not.

So a repair event always states the source row's true state at its place in the log: a key
that was suspected wrongly (it only lagged) gets an ``r`` equal to what the mirror will hold
anyway, which changes nothing. Nothing here trusts the comparison for correctness, only for
which keys to look at.

This is the destination's only writer while it runs: the caller holds the lease (the
supervisor pauses its streaming runtime for it, or the reconciliation took the free lease)
and passes its :class:`~cdc_platform.sink.term.WriteTerm` (epoch, commit gate), exactly as for
a snapshot. The gate only runs before commits, so the caller also passes a
:class:`~cdc_platform.backfill.stop.SideWorkStop`: when the lease goes (or the process stops)
it cuts the source connection, so a read blocked on a partitioned or locked source ends at
once instead of when the server answers.

The request and result types live here too (the reconciliation's inbox sends them as JSON).
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pymysql
from deltalake import DeltaTable

from cdc_platform.backfill.chunk_bytes import keys_within
from cdc_platform.backfill.commit import PendingCommit
from cdc_platform.backfill.segments import (
    SegmentReader,
    SegmentStream,
    SegmentTail,
    events_at_cut,
)
from cdc_platform.backfill.stop import SideWorkStop
from cdc_platform.errors import CdcError, ReconcileError, SnapshotError, SourceError
from cdc_platform.events import ChangeEvent, EventKind, Op, ResumePosition
from cdc_platform.sink.delta import DeltaChangeLog
from cdc_platform.sink.destination_lake import DestinationLake
from cdc_platform.sink.term import WriteTerm
from cdc_platform.source.mysql import connect_source
from cdc_platform.source.reading.row_keys import decode_key
from cdc_platform.source.reading.row_reader import read_keys
from cdc_platform.source.reading.table_description import SnapshotTable, describe_table
from cdc_platform.source.stream.binlog import BinlogSource
from cdc_platform.source.values import dumps

__all__ = ["RepairKey", "RepairResult", "RepairTable", "repair_keys"]

log = logging.getLogger(__name__)

KEYS_PER_READ = 500
"""Suspected keys read (and committed) together: one SELECT ... WHERE (pk) IN (...)."""
_HEARTBEAT_SECONDS = 0.25


@dataclass(frozen=True, slots=True)
class RepairKey:
    """A suspected key: its raw values (as :func:`encode_key` stores them, for the SELECT) and
    its ``pk`` JSON as the change log writes it (for a delete of a row the source lost)."""

    key: list[Any]
    pk: str


@dataclass(frozen=True, slots=True)
class RepairTable:
    """Suspected keys of one table."""

    db: str
    table: str
    keys: list[RepairKey]
    mirror_seq: int = 0
    """The mirror's last applied ``seq`` when it was compared: a key whose newest change-log
    row is newer than this, and already equals the source, only lagged (nothing to repair)."""

    @property
    def name(self) -> str:
        """``db.table``."""
        return f"{self.db}.{self.table}"

    def to_json(self) -> dict[str, Any]:
        """Plain JSON (the request file of :mod:`.request_inbox`)."""
        return {
            "db": self.db,
            "table": self.table,
            "mirror_seq": self.mirror_seq,
            "keys": [{"key": k.key, "pk": k.pk} for k in self.keys],
        }

    @classmethod
    def from_json(cls, item: dict[str, Any]) -> RepairTable:
        """Inverse of :meth:`to_json`."""
        return cls(
            str(item["db"]),
            str(item["table"]),
            [RepairKey(list(k["key"]), str(k["pk"])) for k in item["keys"]],
            int(item.get("mirror_seq", 0)),
        )


@dataclass
class RepairResult:
    """What a repair wrote, per table: upserts (``r``), deletes (``d``), and keys that needed
    nothing: left to the binlog (the segment touched them while they were read: its events
    carry their state) or only lagging (the change log already holds the source's state,
    newer than the mirror was)."""

    upserts: dict[str, int] = field(default_factory=dict)
    deletes: dict[str, int] = field(default_factory=dict)
    in_flight: dict[str, int] = field(default_factory=dict)
    batches: list[int] = field(default_factory=list)
    streamed_events: int = 0
    epoch: int | None = None
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        """Plain JSON (the result file of :mod:`.request_inbox`)."""
        return {
            "upserts": self.upserts,
            "deletes": self.deletes,
            "in_flight": self.in_flight,
            "batches": self.batches,
            "streamed_events": self.streamed_events,
            "epoch": self.epoch,
            "seconds": self.seconds,
        }

    @classmethod
    def from_json(cls, item: dict[str, Any]) -> RepairResult:
        """Inverse of :meth:`to_json`."""
        return cls(
            upserts=dict(item.get("upserts", {})),
            deletes=dict(item.get("deletes", {})),
            in_flight=dict(item.get("in_flight", {})),
            batches=list(item.get("batches", [])),
            streamed_events=int(item.get("streamed_events", 0)),
            epoch=item.get("epoch"),
            seconds=float(item.get("seconds", 0.0)),
        )


def _logged_states(
    lake: DestinationLake, spec: SnapshotTable, pks: list[str]
) -> dict[str, tuple[int, str | None]]:
    """Newest change-log row per ``pk``: (seq, after image or None when deleted)."""
    import pyarrow.compute as pc  # noqa: PLC0415 (a run without side work never needs it)

    dataset = DeltaTable(lake.change_log, storage_options=lake.storage_options).to_pyarrow_dataset()
    rows = dataset.to_table(
        columns=["seq", "pk", "op", "after"],
        filter=(pc.field("db") == spec.db)
        & (pc.field("table") == spec.table)
        & pc.field("pk").isin(pks),
    ).to_pylist()
    newest: dict[str, tuple[int, str | None]] = {}
    for row in rows:
        pk, seq = str(row["pk"]), int(row["seq"])
        if pk not in newest or seq > newest[pk][0]:
            newest[pk] = (seq, None if row["op"] == "d" else row["after"])
    return newest


_COMMITTED_NOW = sys.maxsize
"""``seq`` noted for rows this repair committed: newer than any compared mirror state."""


def _note_committed(
    logged: dict[str, tuple[int, str | None]], events: Sequence[ChangeEvent], spec: SnapshotTable
) -> None:
    """Keep :func:`_logged_states` current with rows just committed (the repair is the only
    writer), instead of reading the change log again for every batch."""
    for event in events:
        if event.kind is not EventKind.ROW or event.db != spec.db or event.table != spec.table:
            continue
        if event.before is not None and event.op is not Op.DELETE:
            old = json.loads(event.before)
            old_pk = dumps({k: old.get(k) for k in spec.primary_key})
            if old_pk != event.pk:  # the update changed the key: the old key is gone
                logged[old_pk] = (_COMMITTED_NOW, None)
        if event.pk is not None:
            logged[event.pk] = (_COMMITTED_NOW, None if event.op is Op.DELETE else event.after)


def _decide(
    part: Sequence[RepairKey],
    source: dict[str, str],
    touched: set[str],
    logged: dict[str, tuple[int, str | None]],
    mirror_seq: int,
) -> tuple[list[tuple[str, str]], list[str], int]:
    """(upserts, deletes, keys needing nothing) for one batch of suspects.

    A key the segment touched is left to the binlog. A key whose newest change-log row came
    after the mirror's compared state and already says what the source says only lagged.
    Everything else is repaired with the source's state: ``r`` if it has the row, else ``d``.
    """
    upserts: list[tuple[str, str]] = []
    deletes: list[str] = []
    skipped = 0
    wanted = set()
    for key in part:
        pk = key.pk
        wanted.add(pk)
        if pk in touched:
            skipped += 1
            continue
        image = source.get(pk)
        logged_row = logged.get(pk)
        if logged_row is not None and logged_row[0] > mirror_seq and logged_row[1] == image:
            skipped += 1
            continue
        if image is None:
            deletes.append(pk)
        else:
            upserts.append((pk, image))
    # rows the SELECT returned under another spelling of a suspected key: their true state
    upserts.extend(
        (pk, image) for pk, image in source.items() if pk not in wanted and pk not in touched
    )
    return upserts, deletes, skipped


def repair_keys(
    term: WriteTerm,
    tables: Sequence[RepairTable],
    *,
    keys_per_read: int = KEYS_PER_READ,
    max_backlog_bytes: int | None = None,
    stop: SideWorkStop | None = None,
) -> RepairResult:
    """Write repair events for the suspected keys; see the module docstring.

    ``term.commit_gate`` is called before every commit and must raise when the lease is not
    held (e.g. :class:`~cdc_platform.errors.LeaseLostError`); the sink's epoch fence backs it
    up (``term.epoch`` None: the checkpoint's). ``term.on_commit`` hears of every commit like
    the runtime's observers do (so the Dagster run materializes the change log and the mirrors
    pick the repairs up). ``stop`` (see :class:`SideWorkStop`) interrupts it from another
    thread. The binlog since the checkpoint is committed in parts of at most
    ``snapshot.segment_events`` events (whole transactions); ``max_backlog_bytes`` refuses a
    checkpoint more binlog bytes than that behind the source (None: no limit).

    Raises:
        ReconcileError: the checkpoint is more than ``max_backlog_bytes`` behind; nothing was
            written.
        SourceError, SinkError, SnapshotError, LeaseLostError: nothing after the last
            successful commit was written; rerunning the reconciliation is safe.
    """
    stop = stop or SideWorkStop(term.destination, term.epoch, work="repair")
    try:
        return _repair(term, tables, keys_per_read, max_backlog_bytes, stop)
    except (CdcError, pymysql.MySQLError, OSError) as exc:
        if stop.reason is not None:
            raise stop.error() from None
        if isinstance(exc, CdcError):
            raise
        raise SourceError(
            f"{term.destination}: reading the source for a repair failed: {exc}"
        ) from None


@dataclass
class _Commits:
    """Where a repair stands (its last batch and cut); every commit of it goes through here."""

    term: WriteTerm
    sink: DeltaChangeLog
    stop: SideWorkStop
    epoch: int
    batch_seq: int
    resume: ResumePosition
    result: RepairResult

    def commit(self, events: list[ChangeEvent], cut: ResumePosition) -> None:
        self.stop.check()
        self.batch_seq += 1
        PendingCommit(
            self.term, self.sink, events, batch_seq=self.batch_seq, resume=cut, epoch=self.epoch
        ).commit_beside()
        self.resume = cut
        self.result.batches.append(self.batch_seq)


def _refuse_backlog(name: str, probe: BinlogSource, resume: ResumePosition, limit: int) -> None:
    """Refuse to stream a backlog larger than ``limit`` binlog bytes for a repair."""
    behind = probe.binlog_server.bytes_after(resume.binlog_position)
    if behind > limit:
        raise ReconcileError(
            f"{name}: the change log's checkpoint ({resume}) is {behind} binlog bytes behind "
            f"the source, more than reconcile.max_repair_backlog_bytes ({limit}); a repair "
            "would first have to stream all of it. Start the destination's normal run "
            "(`cdc-platform run`) to catch up, then reconcile again; nothing was written"
        )


def _repair(  # noqa: PLR0915 - one loop over batches; its context is all here
    term: WriteTerm,
    tables: Sequence[RepairTable],
    keys_per_read: int,
    max_backlog_bytes: int | None,
    stop: SideWorkStop,
) -> RepairResult:
    name, config, password = term.destination, term.config, term.password
    started = time.perf_counter()
    result = RepairResult(epoch=term.epoch)
    todo = [t for t in tables if t.keys]
    if not todo:
        return result
    sink = term.open_change_log()
    conn = connect_source(config.source, password, purpose="reconciliation repair")
    stop.attach(conn)
    stream: SegmentStream | None = None
    try:
        stop.check()
        checkpoint = sink.recover()
        if checkpoint is None:
            raise SnapshotError(
                f"{name}: the change log has no checkpoint yet; start the destination first"
            )
        epoch = term.epoch if term.epoch is not None else checkpoint.epoch
        result.epoch = epoch
        commits = _Commits(term, sink, stop, epoch, checkpoint.batch_seq, checkpoint.resume, result)
        source_config = config.source.model_copy(update={"heartbeat_seconds": _HEARTBEAT_SECONDS})
        probe = BinlogSource(source_config, password=password)
        if max_backlog_bytes is not None:
            _refuse_backlog(name, probe, checkpoint.resume, max_backlog_bytes)
        part_events = config.snapshot.segment_events
        stream = SegmentStream(
            BinlogSource(source_config, resume=checkpoint.resume, password=password),
            read_ahead=part_events,
        )
        segments = SegmentReader(stream, SegmentTail(part_events), part_events)
        for request in todo:
            spec = describe_table(conn, request.db, request.table)
            # Read once per table; what this repair commits meanwhile is noted in memory.
            logged = _logged_states(term.layout, spec, [k.pk for k in request.keys])
            start = 0
            while start < len(request.keys):
                stop.check()
                part = request.keys[start : start + keys_per_read]
                keys = [decode_key(k.key) for k in part]
                fitting = keys_within(conn, spec, keys, config.snapshot.chunk_bytes)
                part, keys = part[:fitting], keys[:fitting]
                probe.current_position()  # low watermark: the SELECT runs after it
                found = read_keys(conn, spec, keys)
                high = probe.current_position()

                def commit_part(events: list[ChangeEvent], cut: ResumePosition) -> None:
                    commits.commit(events, cut)
                    _note_committed(logged, events, spec)  # noqa: B023 (called right here)

                segment = segments.chunk_segment(
                    spec,
                    {k.pk for k in part} | set(found.pks),
                    high=high.binlog_position,
                    cut=commits.resume,
                    commit_part=commit_part,
                )
                result.streamed_events += segment.streamed
                if segment.altered:
                    # Read with the old or the new shape? Commit the segment, read again.
                    spec = describe_table(conn, spec.db, spec.table)
                    upserts: list[tuple[str, str]] = []
                    deletes: list[str] = []
                    in_flight = 0
                else:
                    upserts, deletes, in_flight = _decide(
                        part,
                        dict(zip(found.pks, found.images, strict=True)),
                        segment.touched,
                        logged,
                        request.mirror_seq,
                    )
                    start += len(part)
                events = [*segment.events, *events_at_cut(spec, segment.cut, upserts, deletes)]
                commits.commit(events, segment.cut)
                _note_committed(logged, events, spec)
                table = request.name
                result.upserts[table] = result.upserts.get(table, 0) + len(upserts)
                result.deletes[table] = result.deletes.get(table, 0) + len(deletes)
                result.in_flight[table] = result.in_flight.get(table, 0) + in_flight
                log.info(
                    "%s: repaired %s: %d upserts, %d deletes, %d left to the binlog (batch %d)",
                    name,
                    table,
                    len(upserts),
                    len(deletes),
                    in_flight,
                    commits.batch_seq,
                )
    finally:
        stop.attach(None)
        if stream is not None:
            stream.stop()
        with contextlib.suppress(pymysql.MySQLError, OSError):
            conn.close()
        sink.close()
    result.seconds = time.perf_counter() - started
    return result
