"""The watermark segment: the binlog between two cuts, and the rows placed at a cut.

The watermark method (DBLog / Debezium's incremental snapshot) is shared by the snapshot
(:mod:`.snapshot`) and the repair writer (:mod:`.repair`): rows read from a table are merged
with the binlog *segment* read around them; keys the segment touched are dropped from the
rows (:func:`touched_keys`), and so are keys the end of the previous segment touched
(:class:`SegmentTail`); the rest is placed at the segment's end (:func:`events_at_cut`).

The snapshot streams the binlog from the change log's checkpoint while it reads chunks. A
thread reads events into a bounded queue; :meth:`SegmentStream.part` hands out whole
transactions up to a chunk's high watermark, at most about ``limit`` events at a time, so a
long backlog (the first segment after a pause) is committed in parts instead of being held in
memory. Only the keys of the chunk that the segment touched need to be kept between parts.
"""

from __future__ import annotations

import json
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from cdc_platform.backfill.at_cut import cut_transaction
from cdc_platform.errors import CdcError, SourceError
from cdc_platform.events import (
    BinlogPosition,
    ChangeEvent,
    EventKind,
    Op,
    ResumePosition,
)
from cdc_platform.source.reading.table_description import SnapshotTable
from cdc_platform.source.stream.binlog import BinlogSource
from cdc_platform.source.values import dumps

__all__ = [
    "ChunkSegment",
    "SegmentReader",
    "SegmentStream",
    "SegmentTail",
    "altered",
    "events_at_cut",
    "touched_keys",
]

IDLE_CUT_SECONDS = 1.0
"""Cut a chunk's segment when the stream stays quiet this long before reaching the high
watermark (e.g. the binlog rotated after the last transaction, and no heartbeat said so yet).
Safe for a keyed chunk (an event after the cut that the chunk's read saw is applied again by
key, to the same result); never for a whole copy (an ``exact`` part), whose rows count."""

_QUEUE_EVENTS = 100_000
"""Events read ahead at most (fewer when the caller's part limit is smaller)."""


class SegmentStream:
    """The binlog from the checkpoint on, read by a thread into a bounded queue."""

    def __init__(self, source: BinlogSource, *, read_ahead: int = _QUEUE_EVENTS) -> None:
        self.source = source
        self.queue: queue.Queue[ChangeEvent | BaseException | None] = queue.Queue(
            maxsize=max(1, read_ahead)
        )
        self._thread = threading.Thread(target=self._run, name="cdc-snapshot-binlog", daemon=True)
        self._held: ChangeEvent | None = None
        self._reached = True
        """Whether the last segment end :meth:`_next` gave was ``high`` (not an idle cut)."""
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
        segment, resume, _complete = self.part(high, cut, None)
        return segment, resume

    def part(
        self, high: BinlogPosition, cut: ResumePosition, limit: int | None, *, exact: bool = False
    ) -> tuple[list[ChangeEvent], ResumePosition, bool]:
        """Like :meth:`until`, but stops at the first transaction end once ``limit`` events
        are gathered; the flag says whether ``high`` (or an idle cut) was reached.

        ``high`` is reached at a transaction that ends at or after it, before one that starts
        after it, or at a server heartbeat past it (every event before it is then read).
        ``exact``: no idle cut; a quiet second returns the part so far, not reached.
        A transaction is never split: one larger than ``limit`` is returned whole.
        """
        segment: list[ChangeEvent] = []
        open_txn: list[ChangeEvent] = []
        resume = cut
        if not cut.binlog_position < high:
            return segment, resume, True
        complete = True
        while True:
            event = self._next(high, bool(open_txn))
            if event is None:
                complete = self._reached or not exact
                break
            open_txn.append(event)
            if event.ends_transaction:
                segment.extend(open_txn)
                open_txn = []
                resume = event.resume_after()
                if event.position >= high:
                    break
                if limit is not None and len(segment) >= limit:
                    complete = False
                    break
        if open_txn:
            # Stopped inside a transaction (idle cut): keep it for the next segment.
            self._pushback(open_txn)
        if resume.server is None:  # events name no server: the one they were read from
            resume = replace(resume, server=self.source.server or cut.server)
        return segment, resume, complete

    def _next(self, high: BinlogPosition, in_txn: bool) -> ChangeEvent | None:
        """The next event, or None: when ``high`` is reached (``_reached``: before the first
        transaction past it, which is held back for the next segment, or at a heartbeat past
        it) or after a quiet second (not reached). Idle COMMITs are no part of a segment."""
        self._reached = True
        event = self._held
        self._held = None
        if event is None and self._front:
            event = self._front.pop(0)
        deadline = time.monotonic() + IDLE_CUT_SECONDS
        while event is None:
            event = self._take(deadline)
            if event is None:
                self._reached = False
                return None
            read_to = event.txn.read_to if event.txn.idle else None
            if read_to is not None and read_to >= high and not in_txn:
                return None  # the server had sent everything up to past ``high``
            if event.txn.idle:
                event = None
        if not in_txn and event.txn.start >= high:
            self._held = event  # the first transaction after the high watermark
            return None
        return event

    def _take(self, deadline: float) -> ChangeEvent | None:
        """The next event the reader thread queued, or None if none comes by ``deadline``."""
        try:
            item = self.queue.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            return None
        if isinstance(item, BaseException):
            if isinstance(item, CdcError):
                raise item
            raise SourceError(f"binlog stream failed: {item!r}") from item
        if item is None:
            raise SourceError("binlog stream ended during the snapshot")
        return item

    def _pushback(self, events: list[ChangeEvent]) -> None:
        """Give an incomplete transaction back; it is read again first next time."""
        if self._held is not None:
            self._front.append(self._held)
            self._held = None
        self._front[:0] = events

    def stop(self) -> None:
        """Stop the reader; drain the queue so a reader blocked on a full queue can end."""
        self.source.stop()
        for _ in range(100):
            while True:
                try:
                    self.queue.get_nowait()
                except queue.Empty:
                    break
            self._thread.join(timeout=0.1)
            if not self._thread.is_alive():
                return


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


class SegmentTail:
    """The newest row events before the cut: their keys are dropped from the next read too.

    A transaction can be in the binlog, and so in the segment before a chunk's low cut,
    while InnoDB does not show it yet to the chunk's SELECT (the binlog is written before the
    engine commits). Its key then reads the older state, and an `r` row of it, placed after
    the transaction, would revert it. The key's state is in the log already (the transaction's
    FULL row image), so dropping it from the read is safe; the tail keeps the last
    ``limit`` row events (the ones read most recently, where such a transaction lies) so the
    memory stays bounded.
    """

    def __init__(self, limit: int) -> None:
        self._events: deque[ChangeEvent] = deque(maxlen=max(1, limit))

    def extend(self, events: Sequence[ChangeEvent]) -> None:
        """Note a segment (part) that was read; it now lies before the cut."""
        self._events.extend(e for e in events if e.kind is EventKind.ROW)

    def touched(self, db: str, table: str, key: Sequence[str]) -> set[str]:
        """pk JSON of every row of ``db.table`` the tail changed (see :func:`touched_keys`)."""
        return touched_keys(self._events, db, table, key)


@dataclass(slots=True)
class ChunkSegment:
    """A chunk's segment as :meth:`SegmentReader.chunk_segment` read it."""

    events: list[ChangeEvent]
    """Its last part (the earlier parts are committed)."""
    cut: ResumePosition
    """Where it ends: the chunk's rows are placed here."""
    touched: set[str]
    """The chunk's keys it, or the tail of the previous segment, touched: dropped from the
    chunk."""
    altered: bool
    """Whether a DDL in it may have changed the table."""
    streamed: int
    """Row and DDL events it held."""


@dataclass(frozen=True, slots=True)
class SegmentReader:
    """What the segments of one side writer's chunks are read with: the binlog stream, the
    tail before the cut, and the part size (``snapshot.segment_events``)."""

    stream: SegmentStream
    tail: SegmentTail
    """The newest events before the cut (see :class:`SegmentTail`)."""
    part_events: int
    """Events per committed part of a long segment (a transaction is never split)."""

    def chunk_segment(
        self,
        spec: SnapshotTable,
        chunk_keys: set[str],
        *,
        high: BinlogPosition,
        cut: ResumePosition,
        commit_part: Callable[[list[ChangeEvent], ResumePosition], None],
    ) -> ChunkSegment:
        """Read a chunk's segment, from ``cut`` up to ``high``, after the chunk's SELECT.

        Full parts of about ``part_events`` events go to ``commit_part`` on the way (committed
        before the chunk's rows, they precede them in ``seq`` order as if they were in the
        chunk's commit, so the merge rule holds unchanged); only the chunk's keys they touched
        are kept.
        """
        key = spec.primary_key
        touched = self.tail.touched(spec.db, spec.table, key) & chunk_keys
        changed = False
        streamed = 0
        while True:
            part, cut, complete = self.stream.part(high, cut, self.part_events)
            self.tail.extend(part)
            touched |= touched_keys(part, spec.db, spec.table, key) & chunk_keys
            changed = changed or altered(part, spec)
            streamed += sum(1 for e in part if e.kind is not EventKind.COMMIT)
            if complete:
                return ChunkSegment(part, cut, touched, changed, streamed)
            commit_part(part, cut)


def altered(events: Sequence[ChangeEvent], spec: SnapshotTable) -> bool:
    """Whether a DDL in ``events`` may concern the table (same db; same or unnamed table)."""
    return any(e.op is Op.DDL and e.db == spec.db and e.table in (spec.table, "") for e in events)


def events_at_cut(
    spec: SnapshotTable,
    cut: ResumePosition,
    upserts: Sequence[tuple[str, str]],
    deletes: Sequence[str] = (),
) -> list[ChangeEvent]:
    """Rows read from the table, placed at the cut (their binlog columns say where they
    belong; server_id 0, no GTID): op ``r`` for (pk, image) pairs, then op ``d`` with
    ``before`` = the key for keys the table no longer has (reconciliation repairs)."""
    txn = cut_transaction(cut)
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
