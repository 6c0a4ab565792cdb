"""What the lease holder writes beside its stream: new-table snapshots, repair requests and
ad-hoc snapshot requests.

Only the lease holder writes a destination's change log. So the supervisor itself copies the
tables it has no copy of yet before it streams (config ``snapshot.new_tables``), and when a
request arrives in the destination's inbox (:mod:`cdc_platform.backfill.request_inbox`: a
reconciliation's repair, an ad-hoc snapshot) it stops the runtime after its in-flight commit,
claims the request and dispatches on its kind: a repair writes its events under the same term,
a snapshot runs the watermark snapshot of the requested tables under the term (the binlog flows
into the change log with each chunk); then streaming goes on from the checkpoint.
A batch whose DDL changed rows without row events lists its tables before it commits (the
one commit protocol, :mod:`cdc_platform.backfill.commit`); its commit report names them and
reaches :meth:`SideWork.committed` (the one path, the same for every writer), the runtime
stops after that commit and the tables are re-read the same way
(:mod:`cdc_platform.backfill.reread`).

Each piece of side work runs under a :class:`~cdc_platform.backfill.stop.SideWorkStop`: the
lease-loss callback cuts its source connection, so a read blocked on the source ends at once
with LeaseLostError and nothing is committed after the loss.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Protocol

from cdc_platform.backfill.new_tables import snapshot_new_tables
from cdc_platform.backfill.progress import SnapshotObservers
from cdc_platform.backfill.repair import RepairResult, repair_keys
from cdc_platform.backfill.request_inbox import (
    HolderInbox,
    RepairInbox,
    RepairRequest,
    SnapshotInbox,
    SnapshotRequest,
)
from cdc_platform.backfill.reread import reread_tables
from cdc_platform.backfill.snapshot import SnapshotProgress, SnapshotRunner
from cdc_platform.backfill.stop import SideWorkStop
from cdc_platform.config.instance import InstanceConfig
from cdc_platform.errors import CdcError, SinkError
from cdc_platform.sink.report import CommitReport
from cdc_platform.sink.term import WriteTerm

__all__ = ["Halted", "SideWork", "StoppableRuntime"]

log = logging.getLogger("cdc_platform.runtime")

Halted = Callable[[], str | None]
"""Why the term's writing must end now ("stopping", "lease lost"), or None while it may go on."""

INBOX_POLL_SECONDS = 1.0


class StoppableRuntime(Protocol):
    """The streaming runtime as the inbox watch sees it: a name and a stop request."""

    name: str

    def request_stop(self, reason: str = ...) -> None: ...


class SideWork:
    """The lease holder's side writers for one destination; see the module docstring.

    ``inbox``: where repair and snapshot requests arrive (None: none are served);
    ``lake_root``: where the record of copied tables lives (None: no automatic snapshots).
    """

    def __init__(
        self,
        *,
        inbox: HolderInbox | None = None,
        lake_root: str | None = None,
        on_snapshot_progress: Callable[[SnapshotProgress], None] | None = None,
    ) -> None:
        self.inbox = inbox
        self.lake_root = lake_root
        self.snapshot_requests = 0
        """Snapshot requests served."""
        self._on_snapshot_progress = on_snapshot_progress
        self.request_due = threading.Event()
        """Set by the inbox watch when a request waits: serve it once the runtime stopped."""
        self.snapshot_progress: SnapshotProgress | None = None
        """The newest progress of an automatic snapshot (config `snapshot.new_tables`)."""
        self.repairs = 0
        """Repair requests served."""
        self._reread_due = threading.Event()
        """Set when a committed DDL changed rows without row events: re-read once stopped."""
        self._lock = threading.Lock()
        self._runner: SnapshotRunner | None = None
        self._stop: SideWorkStop | None = None

    # -- stopping ------------------------------------------------------------------------------

    def request_stop(self, reason: str) -> None:
        """A stop request: a snapshot ends after its chunk, a repair at once."""
        with self._lock:
            runner, stop = self._runner, self._stop
        if runner is not None:
            runner.request_stop()
        elif stop is not None:
            stop.request_stop(reason)

    def lease_lost(self, reason: str) -> None:
        """The lease is gone: whatever side work runs ends now (quick: a lease callback)."""
        with self._lock:
            runner, stop = self._runner, self._stop
        if stop is not None:
            stop.request_stop(reason)
        if runner is not None:
            runner.request_stop()

    def _begin(self, stop: SideWorkStop, halted: Halted) -> None:
        """Make ``stop`` reachable by the callbacks; honour a stop that came just before."""
        with self._lock:
            self._stop = stop
        reason = halted()
        if reason is not None:
            stop.request_stop(reason)

    def _end(self) -> None:
        with self._lock:
            self._stop = None
            self._runner = None

    # -- automatic snapshots -------------------------------------------------------------------

    def snapshots(self, config: InstanceConfig) -> bool:
        """Whether the destination copies new tables itself (a binlog source, and
        ``snapshot.new_tables`` on or ``start: {mode: initial}``)."""
        return (
            self.lake_root is not None
            and (config.snapshot.new_tables or config.start.mode == "initial")
            and config.source.mode == "binlog"  # the watch-by-id source lists its tables itself
        )

    def snapshot_new_tables(self, term: WriteTerm, halted: Halted) -> None:
        """Copy tables the destination has no copy of yet, under ``term``."""
        assert self.lake_root is not None

        with self._snapshot_stop(term, halted) as (stop, on_runner):
            snapshot_new_tables(
                term,
                on_progress=self._progress_of(term),
                on_runner=on_runner,
                stop=stop,
                adopt_existing=not term.config.snapshot.new_tables,
            )

    @contextmanager
    def _snapshot_stop(
        self, term: WriteTerm, halted: Halted
    ) -> Iterator[tuple[SideWorkStop, Callable[[SnapshotRunner | None], None]]]:
        """Snapshot side work under ``term``: its stop (a lost lease cuts its source reads) and
        the callback that registers each runner so a stop or a lost lease reaches it."""

        def on_runner(runner: SnapshotRunner | None) -> None:
            with self._lock:
                self._runner = runner
            if runner is not None and halted() is not None:
                runner.request_stop()

        stop = SideWorkStop(term.destination, term.epoch, work="snapshot")
        self._begin(stop, lambda: "lease lost" if halted() == "lease lost" else None)
        try:
            yield stop, on_runner
        finally:
            self._end()

    def _progress_of(self, term: WriteTerm) -> Callable[[SnapshotProgress], None]:
        """The progress callback of a snapshot under ``term`` (new tables, a request, a
        re-read): kept for `status`, told to the term's recorder and the caller's observer."""

        def on_progress(progress: SnapshotProgress) -> None:
            self.snapshot_progress = progress
            term.recorder.snapshot(progress.done_fraction)
            if self._on_snapshot_progress is not None:
                self._on_snapshot_progress(progress)

        return on_progress

    # -- re-reads after DDL --------------------------------------------------------------------

    def rereads(self, config: InstanceConfig) -> bool:
        """Whether tables are re-read after DDL that changed their rows (a binlog source with
        its state in the lake)."""
        return self.lake_root is not None and config.source.mode == "binlog"

    def reread(self, term: WriteTerm, halted: Halted) -> None:
        """Copy the tables waiting for a re-read (see :mod:`cdc_platform.backfill.reread`)."""
        assert self.lake_root is not None

        with self._snapshot_stop(term, halted) as (stop, on_runner):
            reread_tables(
                term,
                on_progress=self._progress_of(term),
                on_runner=on_runner,
                stop=stop,
            )
        self._reread_due.clear()  # what the copy's own commits noted was copied with it

    def committed(self, report: CommitReport) -> bool:
        """Hear of a commit under the term (any writer's, through the term's report): True
        while a re-read after DDL is due (this commit's or an earlier one listed tables,
        before it committed), so the stream stops after this commit."""
        if report.rereads:
            self._reread_due.set()
        return self._reread_due.is_set()

    def take_reread(self) -> bool:
        """Whether a re-read after DDL is due; it is no longer once taken."""
        due = self._reread_due.is_set()
        self._reread_due.clear()
        return due

    # -- requests (repairs, ad-hoc snapshots) --------------------------------------------------

    def start_inbox_watch(
        self, runtime: StoppableRuntime, stop: threading.Event
    ) -> threading.Thread | None:
        """A thread that stops the runtime when a request (of either kind) arrives."""
        inbox = self.inbox
        if inbox is None:
            return None
        name = runtime.name

        def watch() -> None:
            while not stop.wait(INBOX_POLL_SECONDS):
                try:
                    waiting = inbox.pending()
                except (OSError, SinkError) as exc:  # the inbox is in the lake
                    log.warning("%s: cannot read the request inbox: %s", name, exc)
                    continue
                if waiting:
                    log.info("%s: request received; pausing the stream for it", name)
                    self.request_due.set()
                    runtime.request_stop("request received")
                    return

        thread = threading.Thread(target=watch, name=f"cdc-inbox-{name}", daemon=True)
        thread.start()
        return thread

    def serve_requests(
        self, term: WriteTerm, halted: Halted, on_role: Callable[[str], None] | None = None
    ) -> None:
        """Serve every waiting request under ``term``, the oldest first, by its kind.

        ``on_role`` hears ``"snapshot"`` while a snapshot request runs and ``"active"`` after.
        A request that was interrupted (a stop, a lost lease, a failure that may pass) ends
        the serving; the stream (or the next holder) goes on.
        """
        inbox = self.inbox
        assert inbox is not None
        name = term.destination
        while halted() is None:
            try:
                request = inbox.claim()
            except (OSError, SinkError) as exc:  # the inbox is in the lake
                log.warning("%s: cannot read the request inbox: %s", name, exc)
                return
            if request is None:
                return
            if isinstance(request, RepairRequest):
                assert inbox.repairs is not None
                served = self._serve_repair(inbox.repairs, request, term, halted)
            else:
                assert inbox.snapshots is not None
                if on_role is not None:
                    on_role("snapshot")
                try:
                    served = self._serve_snapshot(inbox.snapshots, request, term, halted)
                finally:
                    if on_role is not None:
                        on_role("active")
            if not served:
                return

    def _serve_snapshot(
        self, inbox: SnapshotInbox, request: SnapshotRequest, term: WriteTerm, halted: Halted
    ) -> bool:
        """Snapshot the request's tables under ``term`` and answer it; False when it was
        interrupted (put back: this or the next holder finishes the same snapshot) or the
        answer could not be written.

        A stop or a lost lease ends the snapshot after (or, lease lost, inside) its chunk. A
        refusal (a table that is gone, another snapshot in progress) is the request's answer.
        """
        name, request_id = term.destination, request.request_id
        state_file = term.layout.snapshot_state
        log.info("%s: snapshot request %s: %s", name, request_id, ", ".join(request.tables))
        stop = SideWorkStop(name, term.epoch, work="snapshot")
        runner = SnapshotRunner(
            term,
            state_file,
            tables=request.tables,
            observers=SnapshotObservers(on_progress=self._progress_of(term)),
            stop=stop,
        )
        self._begin(stop, lambda: "lease lost" if halted() == "lease lost" else None)
        with self._lock:
            self._runner = runner
        try:
            with inbox.keep_alive(request_id):
                result = runner.run()
        except CdcError as exc:
            if exc.transient or halted() is not None:
                log.warning("%s: snapshot request %s interrupted: %s", name, request_id, exc)
                self._put_back(inbox, name, request_id)
                return False
            log.error("%s: snapshot request %s failed: %s", name, request_id, exc)
            error = f"{type(exc).__name__}: {exc}"
            return self._answer_snapshot(inbox, name, request_id, None, error)
        finally:
            self._end()
        if state_file.exists():
            self._put_back(inbox, name, request_id)  # stopped after a chunk: finished later
            return False
        self.snapshot_requests += 1
        if not self._answer_snapshot(inbox, name, request_id, dict(result.per_table), None):
            return False
        log.info(
            "%s: snapshot request %s done: %d rows in %d chunks",
            name,
            request_id,
            result.rows_written,
            result.chunks,
        )
        return True

    @staticmethod
    def _put_back(inbox: SnapshotInbox, name: str, request_id: str) -> None:
        """Release an interrupted snapshot request; when the lake refuses, its claim goes
        stale and the next holder takes it over."""
        try:
            inbox.release(request_id)
        except (OSError, SinkError) as exc:  # the inbox is in the lake
            log.warning("%s: cannot put snapshot request %s back: %s", name, request_id, exc)

    @staticmethod
    def _answer_snapshot(
        inbox: SnapshotInbox,
        name: str,
        request_id: str,
        rows: dict[str, int] | None,
        error: str | None,
    ) -> bool:
        """Answer a snapshot request; False when the lake refused (logged: its claim goes
        stale and the request is served again later; a snapshot repeated is harmless)."""
        try:
            inbox.finish(request_id, rows=rows, error=error)
        except (OSError, SinkError) as exc:  # the inbox is in the lake
            log.error("%s: cannot answer snapshot request %s: %s", name, request_id, exc)
            return False
        return True

    def _serve_repair(
        self, inbox: RepairInbox, request: RepairRequest, term: WriteTerm, halted: Halted
    ) -> bool:
        """Repair the request's keys under ``term`` and answer it; False when it failed.

        Whatever happens, the requester gets an answer: a failure (an unexpected one too) is
        written as the request's error result. A lost lease or a stop interrupts the repair
        at once (its :class:`SideWorkStop` cuts its source reads).
        """
        name, request_id = term.destination, request.request_id
        stop = SideWorkStop(name, term.epoch, work="repair")
        self._begin(stop, halted)
        try:
            with inbox.keep_alive(request_id):
                result = repair_keys(term, request.tables, stop=stop)
        except Exception as exc:  # the requester must hear of any failure
            if isinstance(exc, CdcError):
                log.error("%s: repair request %s failed: %s", name, request_id, exc)
            else:
                log.exception("%s: repair request %s failed", name, request_id)
            self._answer_repair(inbox, name, request_id, None, f"{type(exc).__name__}: {exc}")
            return False
        finally:
            self._end()
        self.repairs += 1
        self._answer_repair(inbox, name, request_id, result, None)
        log.info(
            "%s: repair request %s done: %d upserts, %d deletes, %d left to the binlog",
            name,
            request_id,
            sum(result.upserts.values()),
            sum(result.deletes.values()),
            sum(result.in_flight.values()),
        )
        return True

    @staticmethod
    def _answer_repair(
        inbox: RepairInbox,
        name: str,
        request_id: str,
        result: RepairResult | None,
        error: str | None,
    ) -> None:
        """Write a request's result; a storage failure is logged (the requester's wait
        then ends on its own when the claim shows no more sign of life)."""
        try:
            inbox.finish(request_id, result, error=error)
        except (OSError, SinkError) as exc:  # the inbox is in the lake
            log.error("%s: cannot answer repair request %s: %s", name, request_id, exc)
