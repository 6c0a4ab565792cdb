"""The one commit protocol every writer of a change log follows.

The streaming runtime, the snapshot (and the re-read and new-table copies built on it) and
the repair writer all commit the same way, so none can leave a step out:

1. the term's commit gate (the lease is still held) and, for a side writer, its stop;
2. :func:`prepare`: the batch's DDL that changes rows without row events lists its tables for
   a re-read (:func:`~cdc_platform.backfill.reread_list.note_rereads`), *before* the batch is
   committed;
3. the fenced Delta commit (:meth:`~cdc_platform.sink.delta.DeltaChangeLog.commit`), whose
   resume position names the server (a side writer's cut without one keeps the previous
   checkpoint's);
4. the report to the term's observers, naming the tables listed in step 2 so the lease holder
   re-reads them after this commit.

The runtime keeps its own retry loop around step 3 (a commit whose outcome was unknown) and
calls :func:`prepare` once per batch; side writers call :func:`commit_beside`.
"""

from __future__ import annotations

from collections.abc import Sequence

from cdc_platform.backfill.reread_list import note_rereads
from cdc_platform.events import ChangeEvent, Op, ResumePosition
from cdc_platform.sink.commit import CommitResult
from cdc_platform.sink.delta import DeltaChangeLog
from cdc_platform.sink.report import CommitReport, count_ops
from cdc_platform.sink.schema import RowsAtCut
from cdc_platform.sink.term import WriteTerm

__all__ = ["commit_beside", "prepare"]


def prepare(term: WriteTerm, events: Sequence[ChangeEvent]) -> tuple[str, ...]:
    """Steps 1 and 2 for one batch: the gate, then the re-read list; the tables listed."""
    term.check_gate()
    return note_rereads(term, events)


def commit_beside(  # noqa: PLR0913 (the term, the sink and the batch; keyword-only fields)
    term: WriteTerm,
    sink: DeltaChangeLog,
    events: Sequence[ChangeEvent],
    *,
    batch_seq: int,
    resume: ResumePosition,
    epoch: int,
    snapshot: RowsAtCut | None = None,
    chunk: int | None = None,
) -> CommitResult:
    """One commit written beside the stream (a snapshot chunk or segment part, a repair):
    the whole protocol, reported with no binlog lag. ``snapshot``: rows read from a table,
    after the events; ``chunk``: a snapshot chunk's unique mark."""
    rereads = prepare(term, events)
    landed = sink.commit(
        events, batch_seq=batch_seq, resume=resume, epoch=epoch, snapshot=snapshot, chunk=chunk
    )
    ops = count_ops(events)
    if snapshot:
        read = dict(ops)
        read[Op.SNAPSHOT.value] = read.get(Op.SNAPSHOT.value, 0) + len(snapshot)
        ops = tuple(sorted(read.items()))
    term.report(
        CommitReport(
            term.destination,
            batch_seq,
            landed.version,
            landed.rows,
            len(events) + (len(snapshot) if snapshot else 0),
            resume,
            epoch,
            0.0,
            landed.seconds,
            partial=False,
            ops=ops,
            rereads=rereads,
        )
    )
    return landed
