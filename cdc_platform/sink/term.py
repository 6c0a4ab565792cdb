"""A write term: who may write a destination's change log now, and how.

Every writer of a change log (the streaming runtime, the snapshot, the repair writer) needs
the same things: the destination and its config, the table and its storage options, the
lease epoch that fences older writers off, the commit gate that forbids a commit once the
lease is gone, and the observer of commits. One frozen value carries them, so they pass as
one argument instead of a clump of nine.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pydantic import SecretStr

from cdc_platform.config.lake import LakeLocation
from cdc_platform.config.models import InstanceConfig
from cdc_platform.events import ChangeEvent, Op, ResumePosition
from cdc_platform.infra.recorder import NULL_RECORDER, MetricsRecorder
from cdc_platform.sink.commit import CommitResult
from cdc_platform.sink.delta import DeltaChangeLog
from cdc_platform.sink.maintenance import MaintenancePolicy
from cdc_platform.sink.report import CommitReport, count_ops
from cdc_platform.sink.schema import RowsAtCut

__all__ = ["WriteTerm"]


@dataclass(frozen=True)
class WriteTerm:
    """The right to write one destination's change log, and what writing needs.

    ``epoch`` is the fencing token of the lease the writer holds (None: no lease backend,
    the checkpoint's own epoch is used, which still refuses a second writer of a batch);
    ``commit_gate`` is called right before every commit and raises (e.g. LeaseLostError) to
    forbid it; ``before_commit`` gets each batch's events once, after the gate and before the
    batch is committed (what it records must stay true if that commit then fails);
    ``on_commit`` hears of every commit that landed.
    """

    destination: str
    config: InstanceConfig
    table_uri: str
    epoch: int | None = None
    commit_gate: Callable[[], None] | None = None
    on_commit: Callable[[CommitReport], None] | None = None
    before_commit: Callable[[Sequence[ChangeEvent]], None] | None = None
    password: SecretStr | None = None
    """The source password (None: from the config's environment variable)."""
    storage_options: dict[str, str] | None = None
    lake: LakeLocation | None = None
    """The lake the table is in, checked at the start of a run (None: not checked)."""
    maintenance: MaintenancePolicy | None = None
    """The change log's maintenance (None: the defaults)."""
    recorder: MetricsRecorder = NULL_RECORDER
    """Hears every commit (and, from the runtime and the supervisor, lag, buffer and lease)."""

    @classmethod
    def in_lake(  # noqa: PLR0913 (the WriteTerm fields a caller sets, keyword-only)
        cls,
        destination: str,
        config: InstanceConfig,
        lake: LakeLocation,
        *,
        epoch: int | None = None,
        on_commit: Callable[[CommitReport], None] | None = None,
        maintenance: MaintenancePolicy | None = None,
        recorder: MetricsRecorder = NULL_RECORDER,
    ) -> WriteTerm:
        """The term of ``destination``'s change log in ``lake``, with the lake's options."""
        return cls(
            destination,
            config,
            lake.join(destination, config.sink.table),
            epoch=epoch,
            on_commit=on_commit,
            storage_options=lake.delta_options(),
            lake=lake,
            maintenance=maintenance,
            recorder=recorder,
        )

    def open_change_log(self) -> DeltaChangeLog:
        """The destination's change log with this term's storage options and maintenance."""
        return DeltaChangeLog(
            self.table_uri,
            self.destination,
            storage_options=self.storage_options,
            maintenance=self.maintenance or MaintenancePolicy(),
        )

    def check_gate(self) -> None:
        """Raise if a commit is not allowed now (the lease is gone); see ``commit_gate``."""
        if self.commit_gate is not None:
            self.commit_gate()

    def record(self, report: CommitReport) -> None:
        """Tell the recorder (only) of a commit that landed."""
        self.recorder.committed(
            ops=dict(report.ops),
            transactions=report.transactions,
            seconds=report.commit_seconds,
            at=time.time(),
        )

    def prepare(self, events: Sequence[ChangeEvent]) -> None:
        """Hand a batch to ``before_commit`` (see the class docstring)."""
        if self.before_commit is not None:
            self.before_commit(events)

    def report(self, report: CommitReport) -> None:
        """Tell the recorder and ``on_commit`` of a commit that landed."""
        self.record(report)
        if self.on_commit is not None:
            self.on_commit(report)

    def commit_beside(  # noqa: PLR0913 (the sink and the batch; keyword-only commit fields)
        self,
        sink: DeltaChangeLog,
        events: Sequence[ChangeEvent],
        *,
        batch_seq: int,
        resume: ResumePosition,
        epoch: int,
        snapshot: RowsAtCut | None = None,
    ) -> CommitResult:
        """One commit written beside the stream (a snapshot chunk, a repair): through the
        gate, then reported with no binlog lag. ``snapshot``: rows read from a table, after
        the events."""
        self.check_gate()
        self.prepare(events)
        landed = sink.commit(
            events, batch_seq=batch_seq, resume=resume, epoch=epoch, snapshot=snapshot
        )
        ops = count_ops(events)
        if snapshot:
            read = dict(ops)
            read[Op.SNAPSHOT.value] = read.get(Op.SNAPSHOT.value, 0) + len(snapshot)
            ops = tuple(sorted(read.items()))
        self.report(
            CommitReport(
                self.destination,
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
            )
        )
        return landed
