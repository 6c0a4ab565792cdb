"""The two monitors, as Dagster sensors (Canal's InstanceConfigMonitor and ServerRunningMonitor).

`config_monitor` diffs the destinations root against its cursor (content hashes) each tick:
start -> request a run; reload -> cancel the live run and request a new one in the same tick;
stop -> cancel; a failed cancel is retried on the next tick. `running_monitor` makes sure
every enabled destination has a live run and fails runs that Dagster still thinks are STARTED
but that stopped showing signs of life (measured: otherwise such orphans stay STARTED forever).

Run keys are not used: Dagster never forgets a run key, so a destination that comes back
with the same content would never run again. Both sensors de-duplicate against live runs.
"""

import json
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dagster import (
    AssetCheckEvaluation,
    AssetObservation,
    DagsterRun,
    DagsterRunStatus,
    DefaultSensorStatus,
    RunRequest,
    RunsFilter,
    SensorDefinition,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    sensor,
)

from cdc_platform.config import ConfigSet
from cdc_platform.config.monitor import diff_destinations
from cdc_platform.coordination.status import collect_status
from cdc_platform.errors import CdcError, ConfigError
from dagster_defs.cdc_job import CDC_JOB, CONFIG_HASH_TAG, DESTINATION_TAG, STREAM_OP
from dagster_defs.freshness import LAG_REPORT_SECONDS, lag_evaluation
from dagster_defs.resources import PlatformResource
from dagster_defs.translator import DEFAULT_TRANSLATOR, CdcTranslator

__all__ = [
    "LIVE_STATUSES",
    "Liveness",
    "build_config_monitor",
    "build_running_monitor",
    "live_runs",
    "run_request",
]

LIVE_STATUSES = [
    DagsterRunStatus.QUEUED,
    DagsterRunStatus.NOT_STARTED,
    DagsterRunStatus.STARTING,
    DagsterRunStatus.STARTED,
    DagsterRunStatus.CANCELING,
]
"""Runs that hold, or will hold, a destination. CANCELING counts: its successor is queued."""


def live_runs(context: SensorEvaluationContext) -> dict[str, list[DagsterRun]]:
    """Live `cdc_destination` runs, by destination tag."""
    runs = context.instance.get_runs(filters=RunsFilter(job_name=CDC_JOB, statuses=LIVE_STATUSES))
    by_destination: dict[str, list[DagsterRun]] = defaultdict(list)
    for run in runs:
        name = run.tags.get(DESTINATION_TAG)
        if name:
            by_destination[name].append(run)
    return by_destination


def run_request(destination: str, content_hash: str, reason: str) -> RunRequest:
    """A request for the destination's long-lived run."""
    return RunRequest(
        run_key=None,
        run_config={
            "ops": {
                STREAM_OP: {"config": {"destination": destination, "config_hash": content_hash}}
            }
        },
        tags={DESTINATION_TAG: destination, CONFIG_HASH_TAG: content_hash, "cdc/reason": reason},
    )


def _cancel(context: SensorEvaluationContext, run_id: str) -> bool:
    run = context.instance.get_run_by_id(run_id)
    if run is None or run.is_finished or run.status == DagsterRunStatus.CANCELING:
        return True
    try:
        context.instance.run_coordinator.cancel_run(run_id)
    except Exception as exc:
        context.log.warning(f"cancel of run {run_id} failed ({exc}); retrying next tick")
        return False
    return True


def build_config_monitor(
    *,
    minimum_interval_seconds: int = 15,
    default_status: DefaultSensorStatus = DefaultSensorStatus.RUNNING,
) -> SensorDefinition:
    """The config monitor sensor."""

    @sensor(
        name="config_monitor",
        job_name=CDC_JOB,
        minimum_interval_seconds=minimum_interval_seconds,
        default_status=default_status,
        description="Starts, reloads and stops destination runs as conf/destinations changes.",
    )
    def config_monitor(
        context: SensorEvaluationContext, platform: PlatformResource
    ) -> SensorResult:
        cursor = json.loads(context.cursor) if context.cursor else {}
        seen: dict[str, str] = cursor.get("seen", {})
        to_cancel: list[str] = cursor.get("cancel", [])
        try:
            configset = platform.load()
        except ConfigError as exc:
            return SensorResult(skip_reason=SkipReason(f"platform configuration unusable: {exc}"))
        changes = diff_destinations(seen, configset)
        live = live_runs(context)
        for name in [*changes.reload, *changes.stop]:
            to_cancel.extend(run.run_id for run in live.get(name, []))
        still_to_cancel = [
            run_id for run_id in dict.fromkeys(to_cancel) if not _cancel(context, run_id)
        ]
        requests = []
        for name in changes.start:
            if not live.get(name):
                requests.append(run_request(name, changes.seen[name], "config added"))
        for name in changes.reload:
            # a changed file with no run to reload (e.g. a demo started again) is a start
            reason = "config changed" if live.get(name) else "config added"
            requests.append(run_request(name, changes.seen[name], reason))
        for name, error in changes.invalid.items():
            context.log.error(f"destination {name} not loaded: {error}")
        summary = ", ".join(
            f"{what}: {names}"
            for what, names in (
                ("start", changes.start),
                ("reload", changes.reload),
                ("stop", changes.stop),
            )
            if names
        )
        if changes.invalid:
            summary = "; ".join(
                [summary, *(f"invalid {name}: {error}" for name, error in changes.invalid.items())]
            ).strip("; ")
        new_cursor = json.dumps({"seen": changes.seen, "cancel": still_to_cancel}, sort_keys=True)
        if requests:
            return SensorResult(run_requests=requests, cursor=new_cursor)
        return SensorResult(
            skip_reason=SkipReason(summary or "no configuration change"), cursor=new_cursor
        )

    return config_monitor


@dataclass(frozen=True)
class Liveness:
    """What the running monitor knows of a run's health."""

    alive: bool
    detail: str


LivenessProbe = Callable[[str, DagsterRun, float], Liveness]
"""(destination, started run, orphan_after_seconds) -> is it still working?"""


def heartbeat_liveness(context: SensorEvaluationContext) -> LivenessProbe:
    """Judge a STARTED run by its newest event in Dagster's event log.

    The run's op logs a materialization or a heartbeat at least every
    `materialization_min_interval_seconds`... ; a run whose newest event is older than
    `orphan_after_seconds` has lost its worker (or its code server).
    """

    def probe(destination: str, run: DagsterRun, orphan_after: float) -> Liveness:
        records = context.instance.get_records_for_run(run.run_id, limit=1, ascending=False).records
        if not records:
            return Liveness(True, "no events yet")
        age = time.time() - records[0].event_log_entry.timestamp
        if age > orphan_after:
            return Liveness(False, f"no sign of life for {age:.0f} s")
        return Liveness(True, f"last event {age:.0f} s ago")

    return probe


def build_running_monitor(
    *,
    minimum_interval_seconds: int = 15,
    default_status: DefaultSensorStatus = DefaultSensorStatus.RUNNING,
    probe_factory: Callable[[SensorEvaluationContext], LivenessProbe] = heartbeat_liveness,
    grace_seconds: float | None = None,
    clock: Callable[[], float] = time.time,
    translator: CdcTranslator = DEFAULT_TRANSLATOR,
) -> SensorDefinition:
    """The running-node monitor sensor.

    Its findings per destination (holder, epoch, batch, lag, live runs) are also recorded as an
    observation of the destination's change-log asset each tick, so they chart on its page.

    A destination must be without a live run for ``grace_seconds`` (default: two sensor
    intervals) before this monitor requests one, so it never races the config monitor, which
    starts new destinations on its first tick.
    """
    grace = 2.0 * minimum_interval_seconds if grace_seconds is None else grace_seconds

    @sensor(
        name="running_monitor",
        job_name=CDC_JOB,
        minimum_interval_seconds=minimum_interval_seconds,
        default_status=default_status,
        description="Keeps one live run per enabled destination; fails orphaned runs.",
    )
    def running_monitor(
        context: SensorEvaluationContext, platform: PlatformResource
    ) -> SensorResult:
        missing_since, reported = _read_cursor(context.cursor)
        try:
            configset = platform.load()
        except ConfigError as exc:
            return SensorResult(skip_reason=SkipReason(f"platform configuration unusable: {exc}"))
        orphan_after = configset.platform.dagster.orphan_after_seconds
        probe = probe_factory(context)
        live = live_runs(context)
        requests: list[RunRequest] = []
        notes: list[str] = []
        now = clock()
        still_missing: dict[str, float] = {}
        for name, destination in sorted(configset.destinations.items()):
            if not destination.config.enabled:
                continue
            runs = live.get(name, [])
            if _healthy_runs(
                context, name=name, runs=runs, probe=probe, orphan_after=orphan_after, notes=notes
            ):
                continue
            since = missing_since.get(name, now)
            if now - since >= grace:
                requests.append(run_request(name, destination.content_hash, "no live run"))
                notes.append(f"{name}: requesting a run")
            else:
                still_missing[name] = since
                notes.append(f"{name}: no live run for {now - since:.0f} s")
        lease_notes, events = _lease_findings(configset, live, translator, reported, now)
        notes.extend(lease_notes)
        cursor = json.dumps({"missing": still_missing, "reported": reported}, sort_keys=True)
        if requests:
            return SensorResult(run_requests=requests, cursor=cursor, asset_events=events)
        return SensorResult(
            skip_reason=SkipReason("; ".join(notes) or "every destination has a live run"),
            cursor=cursor,
            asset_events=events,
        )

    return running_monitor


def _read_cursor(text: str | None) -> tuple[dict[str, float], dict[str, list[Any]]]:
    """(destinations without a live run since, last lag report per destination: [time,
    passed]); an older cursor held the first alone."""
    doc: dict[str, Any] = json.loads(text) if text else {}
    if "missing" not in doc:
        return {k: float(v) for k, v in doc.items() if isinstance(v, int | float)}, {}
    return dict(doc["missing"]), dict(doc.get("reported", {}))


def _lease_findings(
    configset: ConfigSet,
    live: Mapping[str, Sequence[DagsterRun]],
    translator: CdcTranslator,
    reported: dict[str, list[Any]],
    now: float,
) -> tuple[list[str], list[AssetObservation | AssetCheckEvaluation]]:
    """Holder, epoch, position and lag of each enabled destination: notes for the tick's
    report; and, every ``LAG_REPORT_SECONDS`` or when the verdict changes, an observation of
    the change-log asset and its lag check (``reported`` is updated)."""
    names = [n for n, d in sorted(configset.destinations.items()) if d.config.enabled]
    try:
        statuses = collect_status(configset, names)
    except CdcError as exc:
        return [f"lease status unavailable: {exc}"], []
    notes = []
    observations: list[AssetObservation | AssetCheckEvaluation] = []
    for status in statuses:
        holder = status.holder
        who = f"holder {holder.address} epoch {holder.epoch}" if holder else "no holder"
        lag = "-" if status.lag_seconds is None else f"{status.lag_seconds:.1f} s"
        notes.append(f"{status.destination}: {who}, batch {status.batch_seq}, lag {lag}")
        metadata: dict[str, Any] = {
            "holder": holder.address if holder else "-",
            "live_runs": len(live.get(status.destination, [])),
        }
        if holder is not None:
            metadata["epoch"] = holder.epoch
        if status.batch_seq is not None:
            metadata["batch_seq"] = status.batch_seq
        if status.lag_seconds is not None:
            metadata["lag_seconds"] = round(float(status.lag_seconds), 3)
        key = translator.changes_key(status.destination)
        budget = configset.destinations[status.destination].config.lag_budget_seconds
        lag_seconds = None if status.lag_seconds is None else float(status.lag_seconds)
        check = lag_evaluation(key, lag_seconds, budget, "lease holder's status")
        last = reported.get(status.destination)
        if last is not None and last[1] == check.passed and now - last[0] < LAG_REPORT_SECONDS:
            continue
        reported[status.destination] = [now, check.passed]
        observations.append(
            AssetObservation(
                asset_key=key, description=f"running_monitor: {who}, lag {lag}", metadata=metadata
            )
        )
        # A live run evaluates the check with its own materializations; Dagster shows the
        # newest evaluation, and a runless one would hide the run's ("Not evaluated").
        if not live.get(status.destination):
            observations.append(check)
    return notes, observations


def _healthy_runs(
    context: SensorEvaluationContext,
    *,
    name: str,
    runs: Sequence[DagsterRun],
    probe: LivenessProbe,
    orphan_after: float,
    notes: list[str],
) -> list[DagsterRun]:
    healthy = []
    for run in runs:
        if run.status != DagsterRunStatus.STARTED:
            healthy.append(run)
            continue
        liveness = probe(name, run, orphan_after)
        if liveness.alive:
            healthy.append(run)
            notes.append(f"{name}: run {run.run_id[:8]} {liveness.detail}")
            continue
        message = (
            f"cdc-platform running_monitor: run of destination {name} is STARTED but "
            f"{liveness.detail}; marking it failed so a new run can take over"
        )
        context.instance.report_run_failed(run, message)
        context.log.warning(message)
    return healthy
