"""The one commit protocol every writer of a change log follows.

The streaming runtime, the snapshot (and the re-read and new-table copies built on it) and
the repair writer all commit the same way, so none can leave a step out:

1. the term's commit gate (the lease is still held) and, for a side writer, its stop;
2. the batch's DDL that changes rows without row events lists its tables for a re-read
   (:func:`~cdc_platform.backfill.reread_list.note_rereads`), *before* the batch is committed;
3. the gate again, right before the fenced Delta commit
   (:meth:`~cdc_platform.sink.delta.DeltaChangeLog.commit`), whose resume position names the
   server (a side writer's cut without one keeps the previous checkpoint's);
4. the report to the term's observers, naming the tables listed in step 2 so the lease holder
   re-reads them after this commit.

Each step is written once, in :class:`PendingCommit`. A side writer runs them in order
(:meth:`PendingCommit.commit_beside`); the runtime runs the same steps with its own retry
loop around step 3 (a commit whose outcome was unknown): :meth:`PendingCommit.prepare` once
per batch, :meth:`PendingCommit.land` per attempt, :meth:`PendingCommit.report_of` once it
landed (told to the term's observers once its store acknowledged the batch).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from cdc_platform.backfill.reread_list import note_rereads
from cdc_platform.events import ChangeEvent, Op, ResumePosition
from cdc_platform.sink.commit import CommitResult
from cdc_platform.sink.delta import DeltaChangeLog
from cdc_platform.sink.report import CommitReport, count_ops, count_transactions
from cdc_platform.sink.spilled_rows import SnapshotRows
from cdc_platform.sink.term import WriteTerm

__all__ = ["PendingCommit"]


@dataclass(frozen=True)
class PendingCommit:
    """One batch on its way into ``term``'s change log ``sink``: the protocol's steps.

    ``snapshot``: rows read from a table, committed after ``events`` (op ``r``); ``chunk``: a
    snapshot chunk's unique mark.
    """

    term: WriteTerm
    sink: DeltaChangeLog
    events: Sequence[ChangeEvent]
    batch_seq: int
    resume: ResumePosition
    epoch: int
    snapshot: SnapshotRows | None = None
    chunk: int | None = None

    def prepare(self) -> tuple[str, ...]:
        """Steps 1 and 2, once per batch: the gate, then the re-read list; the tables listed."""
        self.term.check_gate()
        return note_rereads(self.term, self.events)

    def land(self) -> CommitResult:
        """Step 3, once per attempt: the gate, then the fenced commit.

        Raises:
            FencedCommitError: the table holds this batch (or a later one, or a newer epoch).
            SinkError: storage or delta-rs trouble (transient: the outcome may be unknown).
        """
        self.term.check_gate()
        return self.sink.commit(
            self.events,
            batch_seq=self.batch_seq,
            resume=self.resume,
            epoch=self.epoch,
            snapshot=self.snapshot,
            chunk=self.chunk,
        )

    def report_of(
        self,
        landed: CommitResult,
        rereads: tuple[str, ...],
        *,
        lag_seconds: float = 0.0,
        partial: bool = False,
    ) -> CommitReport:
        """Step 4's report of the commit that ``landed`` (``rereads``: the tables step 2
        listed), for ``term.report``. A side writer's commit has no binlog lag; the source
        transactions its events end count as the stream's do."""
        events, snapshot = self.events, self.snapshot
        ops = count_ops(events)
        if snapshot:
            read = dict(ops)
            read[Op.SNAPSHOT.value] = read.get(Op.SNAPSHOT.value, 0) + len(snapshot)
            ops = tuple(sorted(read.items()))
        return CommitReport(
            self.term.destination,
            self.batch_seq,
            landed.version,
            landed.rows,
            len(events) + (len(snapshot) if snapshot else 0),
            self.resume,
            self.epoch,
            lag_seconds,
            landed.seconds,
            partial=partial,
            ops=ops,
            transactions=count_transactions(events),
            rereads=rereads,
        )

    def commit_beside(self) -> CommitResult:
        """One commit written beside the stream (a snapshot chunk or segment part, a repair):
        the whole protocol, reported with no binlog lag."""
        rereads = self.prepare()
        landed = self.land()
        self.term.report(self.report_of(landed, rereads))
        return landed
