"""Run a destination only while its HA lease is held: hot standby, commit gate, epoch claim.

:class:`LeaseSupervisor` wraps :class:`~cdc_platform.runtime.instance.DestinationRuntime`:

1. **Standby**: wait in :meth:`Lease.acquire` (no source connection, no table writes).
2. **Claim**: on acquiring epoch E, write an empty commit with epoch E to the change log before
   streaming. From then on the sink refuses every commit of an older epoch, so a holder that
   was paused (SIGSTOP, a GC pause, a frozen VM) and wakes up after the take-over writes
   nothing, even if it has not noticed yet that its lease is gone (DESIGN.md: fencing).
3. **Gate**: the runtime calls the gate right before every Delta commit; it passes only while
   :meth:`Lease.is_held` is True. While the lease is unconfirmed (ZooKeeper SUSPENDED) it holds
   the commit; when the term is lost it raises LeaseLostError and the run ends.
4. **Loss**: ``on_lost`` stops the runtime after its in-flight commit; the supervisor goes back
   to standby. A stop request, an idle exit or a terminal error releases the lease and returns.

It also heartbeats the node registry (database backend), runs its bounded cleanup while
holding the lease, and publishes lease, config and progress state to the state watch.

5. **Repairs**: with an ``inbox`` (:mod:`cdc_platform.reconcile.inbox`), a reconciliation's
   repair request makes the supervisor stop the runtime after its in-flight commit, write the
   repair events itself under the same epoch and gate, and start a new runtime from the
   checkpoint: only the lease holder ever writes the change log.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from pydantic import SecretStr

from cdc_platform.config.loader import ConfigSet, Destination
from cdc_platform.config.models import InstanceConfig
from cdc_platform.errors import CdcError, LeaseError, LeaseLostError, SinkError
from cdc_platform.ha.lease import Lease
from cdc_platform.ha.registry import NodeRegistry
from cdc_platform.runtime.instance import CommitReport, DestinationRuntime, RunSummary
from cdc_platform.sink import DeltaChangeLog, FencedCommitError, MaintenancePolicy
from cdc_platform.watch.keys import state_keys
from cdc_platform.watch.publisher import StatePublisher

if TYPE_CHECKING:
    from pathlib import Path

    from cdc_platform.reconcile.inbox import RepairInbox
    from cdc_platform.reconcile.repair import RepairResult, RepairStop
    from cdc_platform.runtime.snapshot import SnapshotProgress, SnapshotRunner

__all__ = ["LeaseSupervisor", "supervised_destination"]

log = logging.getLogger("cdc_platform.runtime")

RuntimeFactory = Callable[..., DestinationRuntime]

_CLAIM_ATTEMPTS = 5
_SAME_TERM_RESTARTS = 3


class LeaseSupervisor:
    """One destination under an HA lease; see the module docstring."""

    def __init__(
        self,
        name: str,
        config: InstanceConfig,
        table_uri: str,
        lease: Lease,
        *,
        password: SecretStr | None = None,
        publisher: StatePublisher | None = None,
        registry: NodeRegistry | None = None,
        config_hash: str | None = None,
        on_commit: Callable[[CommitReport], None] | None = None,
        maintenance: MaintenancePolicy | None = None,
        storage_options: dict[str, str] | None = None,
        metrics_interval_seconds: float = 10.0,
        heartbeat_interval: float | None = None,
        registry_maintenance_every: int = 10,
        runtime_factory: RuntimeFactory = DestinationRuntime,
        inbox: RepairInbox | None = None,
        inbox_poll_seconds: float = 1.0,
        lake_root: Path | None = None,
        on_snapshot_progress: Callable[[SnapshotProgress], None] | None = None,
    ) -> None:
        self.name = name
        self.config = config
        self.table_uri = table_uri
        self.lease = lease
        self._password = password
        self._publisher = publisher
        self._registry = registry
        self._config_hash = config_hash
        self._on_commit = on_commit
        self._maintenance = maintenance
        self._storage_options = storage_options
        self._metrics_interval = metrics_interval_seconds
        self._heartbeat_interval = heartbeat_interval or lease.renew_interval
        self._registry_every = max(1, registry_maintenance_every)
        self._factory = runtime_factory
        self._inbox = inbox
        self._inbox_poll = inbox_poll_seconds
        self._repair_due = threading.Event()
        self._lake_root = lake_root
        self._on_snapshot_progress = on_snapshot_progress
        self._snapshot_runner: SnapshotRunner | None = None
        self._repair_stop: RepairStop | None = None
        self.snapshot_progress: SnapshotProgress | None = None
        """The newest progress of an automatic snapshot (config `snapshot.new_tables`)."""
        self.repairs = 0
        """Repair requests served."""
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._stop_reason = "stop requested"
        self._term_lost = threading.Event()
        self._runtime: DestinationRuntime | None = None
        self._gate_waiting = False
        self._epoch: int | None = None
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
            runtime = self._runtime
            snapshot = self._snapshot_runner
            repair = self._repair_stop
        if runtime is not None:
            runtime.request_stop(reason)
        if snapshot is not None:
            snapshot.request_stop()
        if repair is not None:
            repair.request_stop(reason)

    @property
    def runtime(self) -> DestinationRuntime | None:
        """The runtime of the current term, if streaming."""
        return self._runtime

    def _on_lost(self, error: LeaseLostError) -> None:
        """Lease callback (a lease thread): stop writing now."""
        self._term_lost.set()
        with self._lock:
            runtime = self._runtime
            snapshot = self._snapshot_runner
            repair = self._repair_stop
        if runtime is not None:
            runtime.request_stop(f"lease lost: {error.reason}")
        if snapshot is not None:
            snapshot.request_stop()
        if repair is not None:
            repair.request_stop(f"lease lost: {error.reason}")

    # -- the gate and the claim ------------------------------------------------------------------

    def _gate(self) -> None:
        """Right before each commit: pass while the lease is held, hold while unconfirmed."""
        lease = self.lease
        if lease.is_held():
            return
        epoch = self._epoch
        if self._term_lost.is_set() or lease.epoch is None:
            raise LeaseLostError(self.name, epoch, "the lease is no longer held")
        if not self._gate_waiting:
            self._gate_waiting = True
            log.warning(
                "%s: lease not confirmed (epoch %s): holding commits until it is", self.name, epoch
            )
        while True:
            if self._term_lost.is_set():
                raise LeaseLostError(self.name, epoch, "lost while a commit was waiting")
            if self._stop.is_set():
                raise LeaseLostError(self.name, epoch, "stopping while the lease was unconfirmed")
            if lease.wait_held(0.25):
                self._gate_waiting = False
                log.info("%s: lease confirmed again (epoch %s): committing", self.name, epoch)
                return

    def _claim(self, epoch: int) -> None:
        """Commit an empty batch with ``epoch``, fencing off every older writer from now on.

        Storage trouble is retried (with back-off, while the lease is held); a newer epoch in
        the table means the lease is already lost.
        """
        sink = DeltaChangeLog(
            self.table_uri,
            self.name,
            storage_options=self._storage_options,
            maintenance=self._maintenance or MaintenancePolicy(),
        )
        races = 0
        delay = 0.5
        try:
            while True:
                try:
                    if self._claim_once(sink, epoch):
                        return
                    races += 1
                    if races >= _CLAIM_ATTEMPTS:
                        raise LeaseLostError(self.name, epoch, "could not claim the change log")
                except SinkError as exc:
                    if not exc.transient or self._stop.is_set():
                        raise
                    log.warning("%s: claim failed (%s); retrying in %.1f s", self.name, exc, delay)
                    self._stop.wait(delay)
                    delay = min(delay * 2, 10.0)
                    self._gate()  # raises if the lease went meanwhile
        finally:
            sink.close()

    def _claim_once(self, sink: DeltaChangeLog, epoch: int) -> bool:
        """One try: True when claimed (or nothing to claim), False when a commit raced us."""
        checkpoint = sink.recover()
        if checkpoint is None:
            return True  # the runtime's first commit pins the start and carries the epoch
        if checkpoint.epoch > epoch:
            raise LeaseLostError(
                self.name,
                epoch,
                f"the change log already holds a commit of epoch {checkpoint.epoch}",
            )
        if checkpoint.epoch == epoch:
            return True
        self._gate()
        try:
            sink.commit(
                (), batch_seq=checkpoint.batch_seq + 1, resume=checkpoint.resume, epoch=epoch
            )
        except FencedCommitError as exc:
            if exc.table_epoch is not None and exc.table_epoch > epoch:
                raise LeaseLostError(self.name, epoch, str(exc)) from exc
            return False  # the previous holder's last batch landed meanwhile: re-read
        log.info(
            "%s: epoch %d claimed the change log at batch %d (previous epoch %d)",
            self.name,
            epoch,
            checkpoint.batch_seq + 1,
            checkpoint.epoch,
        )
        return True

    def _epoch_floor(self) -> int:
        """Lowest epoch the change log accepts from a new holder (table epoch + 1, or 0)."""
        sink = DeltaChangeLog(self.table_uri, self.name, storage_options=self._storage_options)
        try:
            checkpoint = sink.recover()
        except CdcError as exc:
            log.warning("%s: cannot read the checkpoint yet (%s)", self.name, exc)
            return 0
        finally:
            sink.close()
        return checkpoint.epoch + 1 if checkpoint is not None else 0

    # -- state -----------------------------------------------------------------------------------

    def _publish(
        self, kind: str, value: dict[str, Any], *, fence: int | None, urgent: bool
    ) -> None:
        if self._publisher is not None:
            self._publisher.publish(state_keys(self.name)[kind], value, fence=fence, urgent=urgent)

    def _committed(self, report: CommitReport) -> None:
        self._publish(
            "status",
            {
                "address": self.lease.address,
                "epoch": report.epoch,
                "batch_seq": report.batch_seq,
                "position": str(report.resume),
                "lag_seconds": round(report.lag_seconds, 3),
                "committed_at": time.time(),
                "rows": report.rows,
            },
            fence=report.epoch,
            urgent=False,
        )
        if self._on_commit is not None:
            self._on_commit(report)

    def _heartbeat_loop(self, stop: threading.Event) -> None:
        registry = self._registry
        beats = 0
        while registry is not None and not stop.is_set():
            try:
                registry.heartbeat(
                    self.name,
                    self.lease.address,
                    self.lease.run_id,
                    role=self.role,
                    epoch=self.lease.epoch,
                )
                beats += 1
                if self.role == "active" and beats % self._registry_every == 0:
                    registry.maintain()
            except CdcError as exc:
                log.warning("%s: node registry heartbeat failed: %s", self.name, exc)
            stop.wait(self._heartbeat_interval)

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
                self._term_lost.clear()
                floor = self._epoch_floor()
                self._log_standby()
                epoch = self.lease.acquire(min_epoch=floor, stop=self._stop)
                if epoch is None:
                    break
                self.terms += 1
                self._epoch = epoch
                self.role = "active"
                self._publish_acquired(epoch)
                summary = self._run_term(epoch, exit_when_idle_seconds)
                summaries.append(summary)
                if self._term_lost.is_set() or _fenced(summary.error, epoch):
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
            if self._registry is not None:
                try:
                    self._registry.leave(self.name, self.lease.address, self.lease.run_id)
                except CdcError as exc:
                    log.warning("%s: leaving the node registry failed: %s", self.name, exc)
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

    def _publish_acquired(self, epoch: int) -> None:
        lease = self.lease
        self._publish(
            "lease",
            {
                "state": "held",
                "destination": self.name,
                "address": lease.address,
                "run_id": lease.run_id,
                "epoch": epoch,
                "backend": lease.backend,
                "since": time.time(),
            },
            fence=epoch,
            urgent=True,
        )
        if self._config_hash is not None:
            self._publish(
                "config",
                {"content_hash": self._config_hash, "address": lease.address, "epoch": epoch},
                fence=epoch,
                urgent=True,
            )

    def _release(self, *, publish: bool = False, epoch: int | None = None) -> None:
        try:
            self.lease.release()
        except LeaseError as exc:
            log.warning("%s: releasing the lease failed: %s", self.name, exc)
        if publish and epoch is not None:
            self._publish(
                "lease",
                {
                    "state": "released",
                    "destination": self.name,
                    "address": self.lease.address,
                    "epoch": epoch,
                    "since": time.time(),
                },
                fence=epoch,
                urgent=True,
            )

    def _run_term(self, epoch: int, exit_when_idle: float | None) -> RunSummary:
        summary = RunSummary(self.name, "not started", 0, 0, 0, None)
        restarts = 0
        batches = rows = 0
        snapshot_checked = False
        while restarts < _SAME_TERM_RESTARTS:
            try:
                self._claim(epoch)
                if not snapshot_checked:
                    snapshot_checked = True
                    self._snapshot_new_tables(epoch)
            except CdcError as exc:
                return RunSummary(self.name, "failed", 0, 0, 0, None, exc)
            runtime = self._factory(
                self.name,
                self.config,
                self.table_uri,
                epoch=epoch,
                password=self._password,
                on_commit=self._committed,
                maintenance=self._maintenance,
                storage_options=self._storage_options,
                metrics_interval_seconds=self._metrics_interval,
                commit_gate=self._gate,
            )
            with self._lock:
                self._runtime = runtime
                if self._stop.is_set():
                    runtime.request_stop(self._stop_reason)
            if self._term_lost.is_set():
                runtime.request_stop("lease lost")
            watch_stop = threading.Event()
            watcher = self._start_inbox_watch(runtime, watch_stop)
            try:
                summary = runtime.run(exit_when_idle_seconds=exit_when_idle)
            finally:
                watch_stop.set()
                if watcher is not None:
                    watcher.join(timeout=10)
                with self._lock:
                    self._runtime = None
            batches, rows = batches + summary.batches, rows + summary.rows
            summary = replace(summary, batches=batches, rows=rows)
            error = summary.error
            if (
                self._repair_due.is_set()
                and error is None
                and not self._term_lost.is_set()
                and not self._stop.is_set()
            ):
                self._repair_due.clear()
                self._serve_inbox(epoch)
                continue  # stream again from the checkpoint, same term
            if (
                isinstance(error, FencedCommitError)
                and not _fenced(error, epoch)
                and not self._term_lost.is_set()
                and not self._stop.is_set()
            ):
                # An earlier holder's last batch landed after our recovery: recover again.
                log.warning("%s: %s; recovering again in the same term", self.name, error)
                restarts += 1
                continue
            if isinstance(error, LeaseLostError) and self._stop.is_set():
                summary = replace(summary, reason=self._stop_reason, error=None)
            return summary
        return summary

    # -- automatic snapshots ------------------------------------------------------------------

    def _snapshot_new_tables(self, epoch: int) -> None:
        """Copy tables the destination has no copy of yet (config ``snapshot.new_tables``)."""
        if self._lake_root is None or not self.config.snapshot.new_tables:
            return
        if self.config.source.mode != "binlog":
            return  # the watch-by-id source lists its tables itself
        from cdc_platform.runtime.new_tables import snapshot_new_tables  # noqa: PLC0415

        def on_runner(runner: SnapshotRunner | None) -> None:
            with self._lock:
                self._snapshot_runner = runner
                if runner is not None and (self._stop.is_set() or self._term_lost.is_set()):
                    runner.request_stop()

        def on_progress(progress: SnapshotProgress) -> None:
            self.snapshot_progress = progress
            if self._on_snapshot_progress is not None:
                self._on_snapshot_progress(progress)

        self.role = "snapshot"
        try:
            snapshot_new_tables(
                self.name,
                self.config,
                self.table_uri,
                self._lake_root,
                epoch=epoch,
                commit_gate=self._gate,
                password=self._password,
                maintenance=self._maintenance,
                on_progress=on_progress,
                on_runner=on_runner,
                on_commit=self._committed,
            )
        finally:
            self.role = "active"

    # -- repairs (reconciliation) ------------------------------------------------------------

    def _start_inbox_watch(
        self, runtime: DestinationRuntime, stop: threading.Event
    ) -> threading.Thread | None:
        """A thread that stops the runtime when a repair request arrives."""
        inbox = self._inbox
        if inbox is None:
            return None

        def watch() -> None:
            while not stop.wait(self._inbox_poll):
                try:
                    waiting = inbox.pending()
                except OSError as exc:
                    log.warning("%s: cannot read the repair inbox: %s", self.name, exc)
                    continue
                if waiting:
                    log.info("%s: repair request received; pausing the stream for it", self.name)
                    self._repair_due.set()
                    runtime.request_stop("repair requested")
                    return

        thread = threading.Thread(target=watch, name=f"cdc-inbox-{self.name}", daemon=True)
        thread.start()
        return thread

    def _serve_inbox(self, epoch: int) -> None:
        """Serve every waiting repair request under this term's epoch and gate.

        Whatever happens, the requester gets an answer: a failure (an unexpected one too) is
        written as the request's error result. A lost lease or a stop interrupts the repair
        at once (:class:`~cdc_platform.reconcile.repair.RepairStop` cuts its source reads).
        """
        from cdc_platform.reconcile.repair import RepairStop, repair_keys  # noqa: PLC0415

        inbox = self._inbox
        assert inbox is not None
        while not self._stop.is_set() and not self._term_lost.is_set():
            try:
                claimed = inbox.claim()
            except OSError as exc:
                log.warning("%s: cannot read the repair inbox: %s", self.name, exc)
                return
            if claimed is None:
                return
            request_id, tables = claimed
            stop = RepairStop(self.name, epoch)
            with self._lock:
                self._repair_stop = stop
            if self._stop.is_set() or self._term_lost.is_set():  # raced with the callbacks
                stop.request_stop("stopping" if self._stop.is_set() else "lease lost")
            try:
                with inbox.keep_alive(request_id):
                    result = repair_keys(
                        self.name,
                        self.config,
                        self.table_uri,
                        tables,
                        epoch=epoch,
                        commit_gate=self._gate,
                        password=self._password,
                        maintenance=self._maintenance,
                        storage_options=self._storage_options,
                        on_commit=self._committed,
                        stop=stop,
                    )
            except Exception as exc:  # the requester must hear of any failure
                if isinstance(exc, CdcError):
                    log.error("%s: repair request %s failed: %s", self.name, request_id, exc)
                else:
                    log.exception("%s: repair request %s failed", self.name, request_id)
                self._answer(inbox, request_id, None, f"{type(exc).__name__}: {exc}")
                return
            finally:
                with self._lock:
                    self._repair_stop = None
            self.repairs += 1
            self._answer(inbox, request_id, result, None)
            log.info(
                "%s: repair request %s done: %d upserts, %d deletes, %d left to the binlog",
                self.name,
                request_id,
                sum(result.upserts.values()),
                sum(result.deletes.values()),
                sum(result.in_flight.values()),
            )

    def _answer(
        self, inbox: RepairInbox, request_id: str, result: RepairResult | None, error: str | None
    ) -> None:
        """Write a request's result; a file system failure is logged (the requester's wait
        then ends on its own when the claim shows no more sign of life)."""
        try:
            inbox.finish(request_id, result, error=error)
        except OSError as exc:
            log.error("%s: cannot answer repair request %s: %s", self.name, request_id, exc)

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
    if isinstance(error, LeaseLostError):
        return True
    return (
        isinstance(error, FencedCommitError)
        and error.table_epoch is not None
        and error.table_epoch > epoch
    )


@contextmanager
def supervised_destination(
    config: ConfigSet,
    destination: Destination,
    *,
    address: str | None = None,
    on_commit: Callable[[CommitReport], None] | None = None,
    metrics_interval_seconds: float = 10.0,
    on_snapshot_progress: Callable[[SnapshotProgress], None] | None = None,
) -> Iterator[LeaseSupervisor]:
    """A LeaseSupervisor wired from the platform config (lease, registry, state publisher).

    The one place that builds a lease-gated destination, for `cdc-platform run` and the Dagster
    run alike; everything it opened is closed on exit.
    """
    from cdc_platform.coordination.factory import (  # noqa: PLC0415
        open_lease,
        open_registry,
        open_state_store,
    )

    platform = config.platform
    registry = open_registry(platform, config.conf_dir)
    publisher: StatePublisher | None = None
    try:
        lease = open_lease(
            platform, config.conf_dir, destination.name, address=address, registry=registry
        )
        publisher = StatePublisher(
            open_state_store(platform, config.conf_dir),
            interval=platform.watch.publish_interval_seconds,
        )
        from cdc_platform.reconcile.inbox import destination_inbox  # noqa: PLC0415

        yield LeaseSupervisor(
            destination.name,
            destination.config,
            config.table_uri(destination.name),
            lease,
            publisher=publisher,
            registry=registry,
            config_hash=destination.content_hash,
            on_commit=on_commit,
            metrics_interval_seconds=metrics_interval_seconds,
            inbox=destination_inbox(config.lake_root, destination.name, destination.config.source),
            lake_root=config.lake_root,
            on_snapshot_progress=on_snapshot_progress,
        )
    finally:
        if publisher is not None:
            publisher.close(timeout=2.0)
            publisher.store.close()
        if registry is not None:
            registry.db.close()
