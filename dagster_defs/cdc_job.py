"""The `cdc_destination` job: the long-lived run of one destination.

The engine's runtime runs in a worker thread; the op's own thread waits on it, forwards commit
reports to Dagster as materializations of the destination's change-log asset (throttled), each
with the change log's ``lag_within_budget`` check evaluated in the same run (so Dagster counts
it for that materialization), and turns Dagster's termination (DagsterExecutionInterruptedError:
Terminate in the UI, a reload, Ctrl-C, or SIGTERM / SIGINT sent straight to the run worker)
into a clean stop: the in-flight commit finishes, the source and store close, and the op
returns, so the run ends SUCCESS with no failure event (Dagster draws a CANCELED run in the
same red as a failed one). While the source is idle and the run keeps up, the change log is
materialized again every half lag budget ("current as of now"), so its freshness policy holds.
"""

import os
import queue
import signal
import socket
import threading
import time
from types import FrameType

from dagster import (
    AssetKey,
    AssetMaterialization,
    AssetObservation,
    Config,
    DagsterExecutionInterruptedError,
    DagsterRunStatus,
    Failure,
    JobDefinition,
    OpExecutionContext,
    in_process_executor,
    job,
    op,
)

from cdc_platform.backfill.snapshot import SnapshotProgress
from cdc_platform.config import ConfigSet, Destination
from cdc_platform.runtime import RunSummary
from cdc_platform.runtime.supervisor import LeaseSupervisor
from cdc_platform.sink.report import CommitReport
from dagster_defs.freshness import lag_evaluation
from dagster_defs.resources import CdcResource, PlatformResource, change_log_uri
from dagster_defs.translator import DEFAULT_TRANSLATOR, CdcTranslator

__all__ = [
    "CDC_JOB",
    "CONFIG_HASH_TAG",
    "DESTINATION_TAG",
    "HOST_TAG",
    "METRICS_TAG",
    "PID_TAG",
    "STOPPED_TAG",
    "STREAM_OP",
    "DestinationRunConfig",
    "build_cdc_destination_job",
]

CDC_JOB = "cdc_destination"
"""Name of the job (the monitors request it by name)."""
STREAM_OP = "stream_destination"
"""Name of its one op (run requests configure it by name)."""
DESTINATION_TAG = "cdc/destination"
"""Run tag naming the destination; the instance limits runs to one per value of this tag."""
CONFIG_HASH_TAG = "cdc/config_hash"
PID_TAG = "cdc/pid"
HOST_TAG = "cdc/host"
METRICS_TAG = "cdc/metrics"
"""The run's Prometheus endpoint (with ``metrics.port`` set; a free port per run)."""
STOPPED_TAG = "cdc/stopped"
"""Set on a run that ended on a requested stop (value: ``requested``); it ends SUCCESS."""


class DestinationRunConfig(Config):
    """Which destination this run streams."""

    destination: str
    """Name of the directory under conf/destinations/."""
    config_hash: str = ""
    """Content hash of the instance file the run was requested for (informational)."""


class _Reporter:
    """Turns commit reports from the pipeline thread into throttled materializations.

    Reports are queued by the pipeline thread and logged from the op's thread, which owns the
    Dagster context; several batches in one interval become one materialization.
    """

    def __init__(
        self,
        context: OpExecutionContext,
        asset_key: AssetKey,
        min_interval: float,
        budget_seconds: float,
    ) -> None:
        self.context = context
        self.asset_key = asset_key
        self.min_interval = min_interval
        self.budget_seconds = budget_seconds
        self.queue: queue.SimpleQueue[CommitReport] = queue.SimpleQueue()
        self.total_rows = 0
        self._batches = 0
        self._rows = 0
        self._last: CommitReport | None = None
        self._newest: CommitReport | None = None
        self._reported_at = 0.0
        self._started_at = time.monotonic()

    @property
    def reported_at(self) -> float:
        """Monotonic time of the newest materialization (0.0: none yet)."""
        return self._reported_at

    def flush(self, *, force: bool) -> None:
        """Emit one materialization for what arrived, if due (or forced)."""
        while True:
            try:
                report = self.queue.get_nowait()
            except queue.Empty:
                break
            self._batches += 1
            self._rows += report.rows
            self._last = self._newest = report
        last = self._last
        if last is None or (not force and time.monotonic() - self._reported_at < self.min_interval):
            return
        self.total_rows += self._rows
        now = time.monotonic()
        # Rows per second since the previous materialization (the first: since the run began).
        elapsed = max(now - (self._reported_at or self._started_at), 1e-3)
        self.context.log_event(
            AssetMaterialization(
                asset_key=self.asset_key,
                description=f"{self._batches} batch(es), {self._rows} rows committed",
                metadata={
                    "batch_seq": last.batch_seq,
                    "delta_version": last.version,
                    "rows": self._rows,
                    "batches": self._batches,
                    "rows_total_this_run": self.total_rows,
                    "lag_seconds": round(last.lag_seconds, 3),
                    "rows_per_second": round(self._rows / elapsed, 1),
                    "epoch": last.epoch,
                    "position": str(last.resume),
                },
            )
        )
        self.check(last.lag_seconds, "this run's commit")
        self._batches = self._rows = 0
        self._last = None
        self._reported_at = now

    def check(self, lag_seconds: float | None, source: str) -> None:
        """Evaluate the lag check in this run: Dagster counts it for the newest
        materialization, which this run made (a runless evaluation would read "Not
        evaluated" after the next one)."""
        evaluation = lag_evaluation(self.asset_key, lag_seconds, self.budget_seconds, source)
        self.context.log_event(evaluation)  # type: ignore[arg-type]  # accepted; stubs lag

    def current(self, lag_seconds: float | None, refresh_after: float) -> None:
        """Materialize again when idle: nothing committed for ``refresh_after`` while the
        lag is within the budget means the change log is current as of now."""
        newest = self._newest
        if (
            newest is None
            or lag_seconds is None
            or lag_seconds > self.budget_seconds
            or time.monotonic() - self._reported_at < refresh_after
        ):
            return
        self.context.log_event(
            AssetMaterialization(
                asset_key=self.asset_key,
                description="no new change; current as of now",
                metadata={
                    "batch_seq": newest.batch_seq,
                    "delta_version": newest.version,
                    "rows": 0,
                    "batches": 0,
                    "rows_total_this_run": self.total_rows,
                    "lag_seconds": round(lag_seconds, 3),
                    "rows_per_second": 0.0,
                    "epoch": newest.epoch,
                    "position": str(newest.resume),
                },
            )
        )
        self.check(lag_seconds, "this run's status")
        self._reported_at = time.monotonic()


def _snapshot_metadata(progress: SnapshotProgress) -> dict[str, int | float | str]:
    total = max(progress.estimated_rows, progress.rows_read, 1)
    return {
        "snapshot_table": progress.table,
        "snapshot_table_index": progress.table_index + 1,
        "snapshot_tables": progress.tables,
        "snapshot_rows_read": progress.rows_read,
        "snapshot_rows_estimated": progress.estimated_rows,
        "snapshot_percent": round(100.0 * progress.rows_read / total, 1),
        "snapshot_rows_written": progress.rows_written,
        "snapshot_rows_merged_from_binlog": progress.rows_dropped,
        "snapshot_chunks": progress.chunks,
        "batch_seq": progress.batch_seq,
        "snapshot_seconds": round(progress.seconds, 1),
    }


def _heartbeat(supervisor: LeaseSupervisor) -> str:
    runtime = supervisor.runtime
    progress = supervisor.snapshot_progress
    if runtime is None and supervisor.role == "snapshot" and progress is not None:
        meta = _snapshot_metadata(progress)
        return (
            f"heartbeat {supervisor.name}: snapshot of {meta['snapshot_table']} "
            f"({meta['snapshot_table_index']}/{meta['snapshot_tables']}), "
            f"{meta['snapshot_rows_read']}/{meta['snapshot_rows_estimated']} rows "
            f"({meta['snapshot_percent']}%), batch {meta['batch_seq']}"
        )
    if runtime is None:
        return f"heartbeat {supervisor.name}: {supervisor.role}, waiting for the lease"
    m = runtime.metrics()
    lag = "-" if m.lag_seconds is None else f"{m.lag_seconds:.1f}"
    return (
        f"heartbeat {m.destination}: {supervisor.role} (epoch {supervisor.lease.epoch}), "
        f"{m.state}, batch {m.last_batch_seq}, {m.rows_total} rows, lag {lag} s, "
        f"buffer {m.buffer_items} events / {m.buffer_bytes} bytes, position {m.last_position}"
    )


def _destination(
    context: OpExecutionContext, config: DestinationRunConfig, configset: ConfigSet
) -> Destination:
    name = config.destination
    if name in configset.errors:
        raise Failure(description=str(configset.errors[name]))
    if name not in configset.destinations:
        raise Failure(description=f"destination {name!r} is not configured in {configset.conf_dir}")
    destination = configset.destinations[name]
    if config.config_hash and config.config_hash != destination.content_hash:
        context.log.warning(
            f"{name}: instance file changed since this run was requested; running the current one"
        )
    return destination


class _DeferredSignals:
    """Once a stop is requested, a repeated SIGINT / SIGTERM is ignored until the op ends:
    the in-flight commit finishes and the source and store close (only SIGKILL cuts that
    short); Dagster's handler would raise in the op and fail the step. Dagster puts its own
    handlers back when the op's code returns. The op runs in the run worker's main thread
    (``in_process_executor``); elsewhere nothing changes."""

    def __init__(self) -> None:
        self.deferred = False

    def defer(self) -> None:
        """Ignore the stop signals from now on (for the rest of the op)."""
        if self.deferred or threading.current_thread() is not threading.main_thread():
            return
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, _ignore)
        self.deferred = True


def _ignore(signum: int, frame: FrameType | None) -> None:
    del signum, frame


def _supervise(
    context: OpExecutionContext,
    supervisor: LeaseSupervisor,
    reporter: _Reporter,
    *,
    heartbeat_every: float,
    refresh_after: float,
    signals: _DeferredSignals,
) -> RunSummary | None:
    """Run the pipeline in a worker thread; turn Dagster's termination into a clean stop
    (the op then returns normally: no step failure for a stop someone asked for)."""
    outcome: list[RunSummary] = []
    crashed: list[BaseException] = []
    # Whether the pipeline ended is this event, not Thread.join / is_alive: an interrupt
    # raised inside join() makes CPython 3.11 mark a running thread as stopped (bpo-45274's
    # clean-up releases the lock the live thread holds), and the op stopped waiting for the
    # in-flight commit.
    done = threading.Event()

    def pipeline() -> None:
        try:
            outcome.append(supervisor.run())
        except BaseException as exc:  # reported by the op: a thread's exception goes nowhere
            crashed.append(exc)
            raise
        finally:
            done.set()

    worker = threading.Thread(target=pipeline, name=f"cdc-{supervisor.name}", daemon=True)
    next_heartbeat = time.monotonic() + heartbeat_every
    observed: SnapshotProgress | None = None
    observed_at = 0.0
    worker.start()
    try:
        while not done.wait(timeout=0.5):
            reporter.flush(force=False)
            progress = supervisor.snapshot_progress
            if (
                progress is not None
                and progress is not observed
                and time.monotonic() - observed_at >= reporter.min_interval
            ):
                # Snapshot progress, visible on the change-log asset's page.
                context.log_event(
                    AssetObservation(
                        asset_key=reporter.asset_key,
                        metadata=_snapshot_metadata(progress),
                    )
                )
                observed, observed_at = progress, time.monotonic()
            runtime = supervisor.runtime
            if runtime is not None:
                reporter.current(runtime.metrics().lag_seconds, refresh_after)
            if time.monotonic() >= next_heartbeat:
                # A materialization since the last heartbeat already showed the run alive.
                if time.monotonic() - reporter.reported_at >= heartbeat_every:
                    context.log.info(_heartbeat(supervisor))
                next_heartbeat = time.monotonic() + heartbeat_every
    except DagsterExecutionInterruptedError:
        signals.defer()  # first: a signal repeated while this logs must not fail the step
        supervisor.request_stop("stop requested")
        context.log.info(f"{supervisor.name}: stop requested; finishing the in-flight commit")
        _own_the_stop(context)
        done.wait()
    reporter.flush(force=True)
    if crashed:
        raise Failure(
            description=f"{supervisor.name}: the pipeline thread failed: "
            f"{type(crashed[0]).__name__}: {crashed[0]}"
        ) from crashed[0]
    return outcome[0] if outcome else None


def _own_the_stop(context: OpExecutionContext) -> None:
    """Tag the run as stopped on request, and mark it CANCELING when the interrupt came
    straight to this process.

    Dagster's Terminate marks the run CANCELING before it signals the worker; a SIGTERM from
    anyone else (an operator's ``kill``, a container or machine shutdown) arrives with the run
    still STARTED. The op returns normally after the stop, so the run ends SUCCESS; CANCELING
    matters only if Dagster raises a later signal outside the op (it then ends CANCELED, not
    FAILURE "interrupted unexpectedly").
    """
    context.instance.add_run_tags(context.run_id, {STOPPED_TAG: "requested"})
    run = context.instance.get_run_by_id(context.run_id)
    if run is not None and run.status not in (
        DagsterRunStatus.CANCELING,
        DagsterRunStatus.CANCELED,
    ):
        context.instance.report_run_canceling(
            run, message="Stop signal received by the run worker; stopping cleanly."
        )


def build_cdc_destination_job(translator: CdcTranslator = DEFAULT_TRANSLATOR) -> JobDefinition:
    """The `cdc_destination` job; its commits materialize ``translator.changes_key``."""

    @op(
        name=STREAM_OP,
        description="Stream one destination's binlog into its Delta change log until stopped.",
    )
    def stream_destination(
        context: OpExecutionContext, config: DestinationRunConfig, platform: PlatformResource
    ) -> None:
        """Run the destination's pipeline; materialize its change log as batches commit."""
        _stream(context, config, platform, translator)

    @job(
        name=CDC_JOB,
        executor_def=in_process_executor,
        description="The long-lived CDC run of one destination (requested by the monitors).",
    )
    def cdc_destination() -> None:
        """One destination's stream, as long as it runs."""
        stream_destination()

    return cdc_destination


def _stream(
    context: OpExecutionContext,
    config: DestinationRunConfig,
    cdc: CdcResource,
    translator: CdcTranslator,
) -> None:
    configset = cdc.load()
    destination = _destination(context, config, configset)
    name = destination.name
    settings = configset.platform.dagster
    budget = destination.config.lag_budget_seconds
    reporter = _Reporter(
        context, translator.changes_key(name), settings.materialization_min_interval_seconds, budget
    )
    uri = change_log_uri(configset, name)
    context.log.info(f"{name}: streaming into {uri} (pid {os.getpid()})")
    # The worker's pid and host, for operators (and the kill -9 test) to find the process.
    context.instance.add_run_tags(
        context.run_id, {PID_TAG: str(os.getpid()), HOST_TAG: socket.gethostname()}
    )
    signals = _DeferredSignals()
    with cdc.supervise(
        configset,
        destination,
        address=f"{socket.gethostname()}:{os.getpid()}:{context.run_id[:8]}",
        on_commit=reporter.queue.put,
    ) as (supervisor, metrics_url):
        if metrics_url is not None:
            context.instance.add_run_tags(context.run_id, {METRICS_TAG: metrics_url})
        # The running monitor judges liveness by the run's newest event: one at least this often.
        summary = _supervise(
            context,
            supervisor,
            reporter,
            heartbeat_every=settings.orphan_after_seconds / 2,
            refresh_after=budget / 2,
            signals=signals,
        )
    if summary is None:
        raise Failure(description=f"{name}: the pipeline thread ended without a result")
    if summary.error is not None:
        raise Failure(
            description=f"{name}: {summary.error}",
            metadata={"last_batch_seq": summary.last_batch_seq, "position": str(summary.resume)},
        )
    context.log.info(f"{name}: stopped ({summary.reason}) after batch {summary.last_batch_seq}")
