"""A write term: who may write a destination's change log now, and how.

Every writer of a change log (the streaming runtime, the snapshot, the repair writer) needs
the same things: the destination and its config, its lake (:class:`DestinationLake`: the
change log, the side files and the storage options), the lease epoch that fences older
writers off, the commit gate that forbids a commit once the lease is gone, and the observer
of commits. One frozen value carries them, so they pass as
one argument instead of a clump of nine.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from pydantic import SecretStr

from cdc_platform.config.instance import InstanceConfig
from cdc_platform.config.lake import LakeLocation
from cdc_platform.infra.recorder import NULL_RECORDER, MetricsRecorder
from cdc_platform.sink.delta import DeltaChangeLog
from cdc_platform.sink.destination_lake import DestinationLake
from cdc_platform.sink.maintenance import MaintenancePolicy
from cdc_platform.sink.report import CommitReport

__all__ = ["WriteTerm"]


@dataclass(frozen=True)
class WriteTerm:
    """The right to write one destination's change log, and what writing needs.

    ``epoch`` is the fencing token of the lease the writer holds (None: no lease backend,
    the checkpoint's own epoch is used, which still refuses a second writer of a batch);
    ``commit_gate`` is called right before every commit and raises (e.g. LeaseLostError) to
    forbid it; ``on_commit`` hears of every commit that landed. What every commit does besides
    (the gate, listing tables for a re-read after DDL) is the one commit protocol of
    :mod:`cdc_platform.backfill.commit`, which every writer uses.
    """

    destination: str
    config: InstanceConfig
    layout: DestinationLake
    """Where the destination's change log and files are, with the lake's storage options."""
    epoch: int | None = None
    commit_gate: Callable[[], None] | None = None
    on_commit: Callable[[CommitReport], None] | None = None
    password: SecretStr | None = None
    """The source password (None: from the config's environment variable)."""
    checked_lake: bool = False
    """The lake is checked at the start of a run and re-reads after DDL are listed in its side
    files (False: not checked, no re-reads after DDL)."""
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
            DestinationLake.in_lake(lake, destination, config),
            epoch=epoch,
            on_commit=on_commit,
            checked_lake=True,
            maintenance=maintenance,
            recorder=recorder,
        )

    def open_change_log(self) -> DeltaChangeLog:
        """The destination's change log with the lake's storage options and this maintenance."""
        return DeltaChangeLog(
            self.layout.change_log,
            self.destination,
            storage_options=self.layout.storage_options,
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

    def report(self, report: CommitReport) -> None:
        """Tell the recorder and ``on_commit`` of a commit that landed."""
        self.record(report)
        if self.on_commit is not None:
            self.on_commit(report)
