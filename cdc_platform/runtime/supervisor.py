"""Run a destination only while its HA lease is held: hot standby, commit gate, epoch claim.

:class:`LeaseSupervisor` wraps :class:`~cdc_platform.runtime.instance.DestinationRuntime`:

1. **Standby**: wait in :meth:`Lease.acquire` (no source connection, no table writes).
2. **Claim** (:mod:`.claim`): on acquiring epoch E, write an empty commit with epoch E to the
   change log before streaming, fencing off every older writer (docs/ha.md: fencing).
3. **Gate**: the runtime calls the gate right before every Delta commit; it passes only while
   :meth:`Lease.is_held` is True. While the lease is unconfirmed (ZooKeeper SUSPENDED) it holds
   the commit; when the term is lost it raises LeaseLostError and the run ends.
4. **Loss**: ``on_lost`` stops the runtime after its in-flight commit (and interrupts side
   work at once); the supervisor goes back to standby. A stop request, an idle exit or a
   terminal error releases the lease and returns. A transient error (the source or the lake
   unreachable at the term's start) is retried with the source's backoff while the lease
   is held: it never ends the process.

It also heartbeats the node registry (database backend), runs its bounded cleanup while
holding the lease, and publishes lease, config and progress state to the state watch
(:mod:`.holder_status`); the gate itself is :mod:`.lease_gate`.

5. **Side work** (:mod:`.side_work`): new-table snapshots before streaming, requests from
   the destination's inbox (a reconciliation's repairs, ad-hoc snapshots), and re-reads of
   tables a DDL changed without row events (docs/ddl.md): the supervisor stops the runtime
   after its in-flight commit, writes the side work's events itself under the same term, and
   starts a new runtime from the checkpoint: only the lease holder ever writes the change
   log.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import replace
from typing import Protocol

from cdc_platform.backfill.snapshot import SnapshotProgress
from cdc_platform.coordination.lease import take_lease
from cdc_platform.errors import (
    CdcError,
    LeaseError,
    LeaseLostError,
    StaleSideFileError,
)
from cdc_platform.ha.lease import Lease
from cdc_platform.infra.backoff import Backoff
from cdc_platform.runtime.claim import claim_change_log
from cdc_platform.runtime.holder_status import HolderStatus, StatusChannels
from cdc_platform.runtime.instance import DestinationRuntime, RunSummary
from cdc_platform.runtime.lease_gate import LeaseGate
from cdc_platform.runtime.runtime_metrics import RuntimeMetrics
from cdc_platform.runtime.side_work import SideWork, StoppableRuntime
from cdc_platform.sink import FencedCommitError
from cdc_platform.sink.report import CommitReport
from cdc_platform.sink.term import WriteTerm

__all__ = ["LeaseSupervisor", "RuntimeFactory"]

log = logging.getLogger("cdc_platform.runtime")


class StreamingRuntime(StoppableRuntime, Protocol):
    """What the supervisor and its observers need of a runtime (DestinationRuntime; tests
    use a fake)."""

    def run(self, *, exit_when_idle_seconds: float | None = None) -> RunSummary: ...

    def metrics(self) -> RuntimeMetrics: ...


RuntimeFactory = Callable[[WriteTerm], StreamingRuntime]
"""Builds the runtime of one lease term from the term (its epoch, gate and observer)."""

_SAME_TERM_RESTARTS = 3


class LeaseSupervisor:
    """One destination under an HA lease; see the module docstring.

    ``term`` is the destination's write term without a lease (its epoch and gate are this
    supervisor's, set per lease term); its ``on_commit`` hears of every commit. ``channels``:
    where the node reports (:class:`~.holder_status.StatusChannels`; none by default).
    """

    def __init__(
        self,
        term: WriteTerm,
        lease: Lease,
        *,
        channels: StatusChannels | None = None,
        runtime_factory: RuntimeFactory = DestinationRuntime,
        side_work: SideWork | None = None,
    ) -> None:
        self.name = term.destination
        self.config = term.config
        self.term = term
        self.lease = lease
        self._status = HolderStatus(self.name, lease, channels or StatusChannels())
        self._factory = runtime_factory
        self._side = side_work or SideWork()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._stop_reason = "stop requested"
        self._gate = LeaseGate(self.name, lease, self._stop)
        self._wake = threading.Event()
        """Set by a stop request and a lost lease: ends a retry's wait at once."""
        self._runtime: StreamingRuntime | None = None
        self.terms = 0
        """Terms this supervisor held the lease for (one per acquisition)."""
        self.role = "standby"

    # -- control ---------------------------------------------------------------------------------

    def request_stop(self, reason: str = "stop requested") -> None:
        """End the run: leave standby, or stop the runtime after its in-flight commit."""
        with self._lock:
            if not self._stop.is_set():
                self._stop_reason = reason
            self._stop.set()
            self._wake.set()
            runtime = self._runtime
        if runtime is not None:
            runtime.request_stop(reason)
        self._side.request_stop(reason)

    @property
    def runtime(self) -> StreamingRuntime | None:
        """The runtime of the current term, if streaming."""
        return self._runtime

    @property
    def snapshot_progress(self) -> SnapshotProgress | None:
        """The newest progress of an automatic snapshot (config `snapshot.new_tables`)."""
        return self._side.snapshot_progress

    @property
    def repairs(self) -> int:
        """Repair requests served."""
        return self._side.repairs

    def _on_lost(self, error: LeaseLostError) -> None:
        """Lease callback (a lease thread): stop writing now."""
        self._gate.lost.set()
        self._wake.set()
        self.term.recorder.lease(held=False, epoch=self._gate.epoch)
        with self._lock:
            runtime = self._runtime
        if runtime is not None:
            runtime.request_stop(f"lease lost: {error.reason}")
        self._side.lease_lost(f"lease lost: {error.reason}")

    def _halted(self) -> str | None:
        """Why this term's writing must end now, or None (see :data:`.side_work.Halted`)."""
        if self._stop.is_set():
            return "stopping"
        if self._gate.lost.is_set():
            return "lease lost"
        return None

    # -- the claim and the state ---------------------------------------------------------------

    def _claim(self, epoch: int) -> None:
        """Fence off every older writer before this term writes (:mod:`.claim`)."""
        claim_change_log(self.term, epoch, gate=self._gate)

    def _committed(self, report: CommitReport) -> None:
        """Commit observer of every writer under the held term (the term's ``report`` told
        the recorder already): publish the status, then tell the caller's observer. A commit
        that listed tables for a re-read after DDL stops the runtime after it."""
        self._status.committed(report)
        self._publish_status(report.epoch)
        if self.term.on_commit is not None:
            self.term.on_commit(report)
        if self._side.committed(report):
            with self._lock:
                runtime = self._runtime
            if runtime is not None:
                runtime.request_stop("re-read after DDL")

    def _publish_status(self, epoch: int | None) -> None:
        """The holder's ``status`` entry (:meth:`.HolderStatus.publish_status`)."""
        runtime = self._runtime
        figures = runtime.metrics if runtime is not None else None
        self._status.publish_status(epoch, figures, self._side.snapshot_progress)

    def _heartbeat_loop(self, stop: threading.Event) -> None:
        """Every renew interval: the registry row (database backend), and while active the
        live status figures (published at most once per publish interval)."""
        while not stop.is_set():
            if self.role == "active":
                self._publish_status(self._gate.epoch)
            self._status.heartbeat(self.role)
            stop.wait(self.lease.renew_interval)

    # -- run -------------------------------------------------------------------------------------

    def run(self, *, exit_when_idle_seconds: float | None = None) -> RunSummary:
        """Stand by, hold, stream; back to standby on loss; return on stop, idle or failure."""
        self.lease.on_lost(self._on_lost)
        self.lease.start()
        beat_stop = threading.Event()
        beat = threading.Thread(
            target=self._heartbeat_loop, args=(beat_stop,), name=f"cdc-heartbeat-{self.name}"
        )
        beat.daemon = True
        beat.start()
        summaries: list[RunSummary] = []
        final: RunSummary | None = None
        try:
            while not self._stop.is_set():
                self.role = "standby"
                self._gate.lost.clear()
                self._wake.clear()
                if self._stop.is_set():
                    break
                self._log_standby()
                held = take_lease(
                    self.lease,
                    replace(
                        self.term,
                        commit_gate=self._gate,
                        on_commit=self._committed,
                    ),
                    stop=self._stop,
                )
                if held is None or held.epoch is None:
                    break
                epoch = held.epoch
                self.terms += 1
                self._gate.epoch = epoch
                self.role = "active"
                self.term.recorder.lease(held=True, epoch=epoch)
                self._status.acquired(epoch)
                summary = self._run_term(held, epoch, exit_when_idle_seconds)
                summaries.append(summary)
                if self._gate.lost.is_set() or _fenced(summary.error, epoch):
                    why = (
                        summary.error.reason
                        if isinstance(summary.error, LeaseLostError)
                        else (summary.error or summary.reason)
                    )
                    log.warning(
                        "%s: lease lost (epoch %d): %s; back to standby", self.name, epoch, why
                    )
                    self._release()
                    continue
                final = summary
                self._release(publish=True, epoch=epoch)
                break
        finally:
            beat_stop.set()
            beat.join(timeout=10)  # a late heartbeat would re-insert the row we remove below
            self.role = "stopped"
            self._release()
            self.lease.close()
            self._status.leave()
        return self._summary(summaries, final)

    def _log_standby(self) -> None:
        try:
            holder = self.lease.holder()
        except LeaseError as exc:
            log.info("%s: standby, waiting for the lease (store: %s)", self.name, exc)
            return
        if holder is None:
            log.info("%s: standby, the lease is free", self.name)
        else:
            log.info(
                "%s: standby, waiting for the lease held by %s (epoch %d)",
                self.name,
                holder.address,
                holder.epoch,
            )

    def _release(self, *, publish: bool = False, epoch: int | None = None) -> None:
        self.term.recorder.lease(held=False, epoch=self._gate.epoch)
        try:
            self.lease.release()
        except LeaseError as exc:
            log.warning("%s: releasing the lease failed: %s", self.name, exc)
        if publish and epoch is not None:
            self._status.released(epoch)

    def _run_term(self, term: WriteTerm, epoch: int, exit_when_idle: float | None) -> RunSummary:
        """Claim the change log, copy new tables, stream (pausing for repairs) until the term
        ends; ``term`` carries ``epoch``, this supervisor's gate and its commit observer.

        A transient fault (the source down during the start's snapshot, the lake unreachable
        at recovery) does not end the term: it is retried with the source's backoff for as
        long as the lease is held.
        """
        summary = RunSummary(self.name, "not started", 0, 0, 0, None)
        restarts = 0
        batches = rows = 0
        started = False
        source = self.config.source
        backoff = Backoff(source.reconnect_initial_seconds, source.reconnect_max_seconds)
        while restarts < _SAME_TERM_RESTARTS:
            why = self._halted()
            if why is not None:  # while waiting to retry
                reason = self._stop_reason if why == "stopping" else why
                return replace(summary, reason=reason, error=None)
            try:
                self._claim(epoch)
                if not started:
                    self._snapshot_new_tables(term)
                    self._reread(term)
                    started = True
            except CdcError as exc:
                if self._retry_later(exc, backoff, "starting the term"):
                    continue
                return RunSummary(self.name, "failed", batches, rows, 0, None, exc)
            summary = self._stream(term, exit_when_idle)
            batches, rows = batches + summary.batches, rows + summary.rows
            summary = replace(summary, batches=batches, rows=rows)
            if summary.batches:
                backoff.reset()
            error = summary.error
            if error is None:
                try:
                    if self._paused_for_side_work(term):
                        continue  # stream again from the checkpoint, same term
                except CdcError as exc:
                    error = exc
                    summary = replace(summary, reason="failed", error=exc)
            if error is not None and self._retry_later(error, backoff, "streaming"):
                continue  # e.g. the lake unreachable when the runtime recovered
            if (
                isinstance(error, FencedCommitError)
                and not _fenced(error, epoch)
                and self._halted() is None
            ):
                # An earlier holder's last batch landed after our recovery: recover again.
                log.warning("%s: %s; recovering again in the same term", self.name, error)
                restarts += 1
                continue
            if isinstance(error, LeaseLostError) and self._stop.is_set():
                summary = replace(summary, reason=self._stop_reason, error=None)
            return summary
        return summary

    def _stream(self, term: WriteTerm, exit_when_idle: float | None) -> RunSummary:
        """One runtime of this term, from the checkpoint until it stops (a stop, a lost lease,
        a request for side work, a failure); an inbox watch beside it."""
        runtime = self._factory(term)
        with self._lock:
            self._runtime = runtime
            if self._stop.is_set():
                runtime.request_stop(self._stop_reason)
        if self._gate.lost.is_set():
            runtime.request_stop("lease lost")
        watch_stop = threading.Event()
        watcher = self._side.start_inbox_watch(runtime, watch_stop)
        try:
            return runtime.run(exit_when_idle_seconds=exit_when_idle)
        finally:
            watch_stop.set()
            if watcher is not None:
                watcher.join(timeout=10)
            with self._lock:
                self._runtime = None

    def _retry_later(self, error: CdcError, backoff: Backoff, doing: str) -> bool:
        """Wait out a transient ``error`` of this term (True: try again); False when it is
        terminal or the term is ending (a stop or a lost lease ends the wait at once)."""
        if not error.transient or self._halted() is not None:
            return False
        delay = backoff.next_delay()
        log.warning(
            "%s: %s failed (attempt %d): %s; retrying in %.1f s while the lease is held",
            self.name,
            doing,
            backoff.attempts,
            error,
            delay,
        )
        self._wake.wait(delay)
        return True

    def _snapshot_new_tables(self, term: WriteTerm) -> None:
        """Copy tables the destination has no copy of yet (config ``snapshot.new_tables``)."""
        if not self._side.snapshots(self.config):
            return
        self.role = "snapshot"
        try:
            self._side.snapshot_new_tables(term, self._halted)
        finally:
            self.role = "active"

    def _paused_for_side_work(self, term: WriteTerm) -> bool:
        """Serve what the runtime stopped for (a request, a re-read after DDL); True
        when the stream starts again in this term."""
        side = self._side
        served = False
        if side.request_due.is_set() and self._halted() is None:
            side.request_due.clear()
            side.serve_requests(term, self._halted, on_role=self._set_role)
            served = True
        if self._halted() is None and side.take_reread():
            self._reread(term)
            served = True
        return served

    def _reread(self, term: WriteTerm) -> None:
        """Re-read tables a DDL changed without row events (:mod:`.side_work`)."""
        if not self._side.rereads(self.config):
            return
        self.role = "snapshot"
        try:
            self._side.reread(term, self._halted)
        finally:
            self.role = "active"

    def _set_role(self, role: str) -> None:
        """What this node does now (``active``, ``snapshot``), as side work reports it."""
        self.role = role

    def _summary(self, summaries: list[RunSummary], final: RunSummary | None) -> RunSummary:
        """Totals over all terms; the error only of a term that ended the run (a lost term
        sent us back to standby, which is not a failure)."""
        batches = sum(s.batches for s in summaries)
        rows = sum(s.rows for s in summaries)
        if final is not None:
            reason = self._stop_reason if self._stop.is_set() and final.error is None else None
            return replace(final, batches=batches, rows=rows, reason=reason or final.reason)
        last = summaries[-1] if summaries else None
        return RunSummary(
            self.name,
            self._stop_reason,
            batches,
            rows,
            last.last_batch_seq if last is not None else 0,
            last.resume if last is not None else None,
        )


def _fenced(error: CdcError | None, epoch: int) -> bool:
    """True when the error means another holder owns the destination now."""
    if isinstance(error, LeaseLostError | StaleSideFileError):
        return True  # a side file refused this term's write: a newer term wrote it
    return (
        isinstance(error, FencedCommitError)
        and error.table_epoch is not None
        and error.table_epoch > epoch
    )
