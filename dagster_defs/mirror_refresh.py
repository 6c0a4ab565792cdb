"""``mirror_refresh``: the one mechanism that keeps every mirror current and fresh, with as
few runs as the mirrors' freshness policy allows.

Each tick, per destination, it knows how old the oldest of the mirrors' newest materializations
is, and how long a mirrors run of the destination takes (from its newest successful runs,
queueing and start included). It requests one run for all the destination's tables once
waiting any longer would let a mirror age past its freshness policy's window (the warn window,
else the fail window) before the run lands: ``window - tick - run - window/5``. Whether the
change log moved since (busy source) or not (quiet source: the run materializes the mirrors as
"current as of now") only changes the run's ``cdc/trigger`` tag; a table never materialized
is requested at once. So a destination costs about one run per that period (a 300 s lag
budget: a run about every two minutes instead of one per sensor tick), and a change reaches its
mirror within that period plus a run. ``dagster.mirror_refresh_seconds`` shortens the period
(mirrors closer to the source, more runs); it never lengthens it past the policy.

The change log's progress is judged by Delta versions: the newest one its long-lived run
reported (``delta_version`` of the change log's newest materialization) against the one each
mirror's newest materialization applied (``change_log_version``). It never requests while a
mirrors run of the destination is queued or running, and waits ``retry_after_seconds`` after a
failed one. Its skip reason says, per destination, which case held.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from dagster import (
    AssetKey,
    DagsterInstance,
    DagsterRunStatus,
    DefaultSensorStatus,
    EventLogEntry,
    RunRequest,
    RunsFilter,
    SensorDefinition,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    sensor,
)

from cdc_platform.errors import ConfigError
from dagster_defs.resources import PlatformResource
from dagster_defs.sensors import LIVE_STATUSES
from dagster_defs.table_assets import CHANGE_LOG_VERSION, MIRROR_TAG, MIRRORS_JOB
from dagster_defs.translator import DEFAULT_TRANSLATOR, CdcTranslator

__all__ = ["TRIGGER_TAG", "Decision", "MirrorsState", "build_mirror_refresh", "decide", "period"]

TRIGGER_TAG = "cdc/trigger"
"""Run tag: why the run was requested (``new-table``, ``changes`` or ``refresh``)."""
DEFAULT_RUN_SECONDS = 30.0
"""What a mirrors run is assumed to take before one of the destination succeeded."""


class Decision(NamedTuple):
    """Whether to request the mirrors now, the run's trigger tag, and why (or why not)."""

    due: bool
    trigger: str
    why: str


def period(
    window_seconds: float, tick_seconds: float, run_seconds: float, cap: float | None = None
) -> float:
    """How old the oldest mirror materialization may get before a run is requested: the
    next materialization still lands inside ``window_seconds`` after up to one more tick and
    one run, with a fifth of the window to spare for a late tick or a slow run on a loaded
    machine (0: back to back); at most ``cap``."""
    wait = window_seconds - tick_seconds - run_seconds - window_seconds / 5
    return max(0.0, wait if cap is None else min(cap, wait))


@dataclass(frozen=True, slots=True)
class MirrorsState:
    """What the sensor knows of one destination's mirrors."""

    changes_version: int | None
    """Newest change-log version its run reported (None: nothing committed yet)."""
    applied_versions: Sequence[int | None]
    """Per table, the change-log version its newest materialization applied (None: never)."""
    oldest_materialized_at: float | None
    """Time of the oldest of the tables' newest materializations (None: one never ran)."""
    run_in_progress: str | None = None
    failed_at: float | None = None
    """End of the newest mirrors run, when it failed."""
    run_seconds: float | None = None
    """Longest of the newest successful mirrors runs, from creation to end (None: none yet)."""


def _blocked(state: MirrorsState, now: float, retry_after: float) -> str | None:
    """Why no run may be requested now, if so."""
    if state.run_in_progress:
        return f"run {state.run_in_progress[:8]} is applying"
    if state.changes_version is None:
        return "no change-log commit reported yet"
    if state.failed_at is not None and now - state.failed_at < retry_after:
        return f"last mirrors run failed; retrying in {retry_after - (now - state.failed_at):.0f} s"
    return None


def decide(
    state: MirrorsState, *, now: float, refresh_after: float, retry_after: float
) -> Decision:
    """Whether to request the mirrors now (``refresh_after``: :func:`period`), and why."""
    blocked = _blocked(state, now, retry_after)
    if blocked is not None or state.changes_version is None:
        return Decision(False, "", blocked or "")
    never = sum(1 for v in state.applied_versions if v is None)
    if never:
        return Decision(True, "new-table", f"{never} table(s) never materialized")
    applied = min(v for v in state.applied_versions if v is not None)
    behind = state.changes_version > applied
    oldest = state.oldest_materialized_at
    age = 0.0 if oldest is None else now - oldest
    if age >= refresh_after and behind:
        return Decision(
            True,
            "changes",
            f"change log at version {state.changes_version}, mirrors at {applied} "
            f"(oldest materialized {age:.0f} s ago)",
        )
    if age >= refresh_after:
        return Decision(True, "refresh", f"refresh: oldest mirror materialized {age:.0f} s ago")
    waiting = (
        f"change log at version {state.changes_version}, mirrors at {applied}"
        if behind
        else f"up to date at change-log version {state.changes_version}"
    )
    return Decision(False, "", f"{waiting}; next run in {refresh_after - age:.0f} s")


def _int(entry: EventLogEntry | None, key: str) -> int | None:
    materialization = entry.asset_materialization if entry else None
    value = materialization.metadata.get(key) if materialization else None
    return int(value.value) if value is not None and isinstance(value.value, int) else None


def _state(
    instance: DagsterInstance, destination: str, changes: AssetKey, keys: Sequence[AssetKey]
) -> MirrorsState:
    live = instance.get_runs(
        filters=RunsFilter(tags={MIRROR_TAG: destination}, statuses=LIVE_STATUSES), limit=1
    )
    newest = instance.get_runs(filters=RunsFilter(tags={MIRROR_TAG: destination}), limit=1)
    failed_at = None
    if newest and newest[0].status == DagsterRunStatus.FAILURE:
        record = instance.get_run_record_by_id(newest[0].run_id)
        failed_at = record.end_time if record and record.end_time else time.time()
    done = instance.get_run_records(
        filters=RunsFilter(tags={MIRROR_TAG: destination}, statuses=[DagsterRunStatus.SUCCESS]),
        limit=5,
    )
    took = [r.end_time - r.create_timestamp.timestamp() for r in done if r.end_time]
    latest = instance.get_latest_materialization_events(keys)
    entries = [latest.get(k) for k in keys]
    times = [e.timestamp for e in entries if e is not None]
    return MirrorsState(
        changes_version=_int(instance.get_latest_materialization_event(changes), "delta_version"),
        applied_versions=[_int(e, CHANGE_LOG_VERSION) for e in entries],
        oldest_materialized_at=min(times) if len(times) == len(keys) else None,
        run_in_progress=live[0].run_id if live else None,
        failed_at=failed_at,
        run_seconds=max(took) if took else None,
    )


def build_mirror_refresh(
    tables: Mapping[str, Sequence[AssetKey]],
    windows: Mapping[str, float],
    *,
    minimum_interval_seconds: int = 10,
    retry_after_seconds: float = 60.0,
    refresh_cap_seconds: float | None = None,
    clock: Callable[[], float] = time.time,
    translator: CdcTranslator = DEFAULT_TRANSLATOR,
) -> SensorDefinition:
    """The `mirror_refresh` sensor over each destination's mirror keys (``tables``);
    ``windows`` is each destination's freshness window (seconds, its mirrors' warn window,
    else fail window); ``refresh_cap_seconds`` the longest period between runs, if set."""

    @sensor(
        name="mirror_refresh",
        job_name=MIRRORS_JOB,
        minimum_interval_seconds=minimum_interval_seconds,
        default_status=DefaultSensorStatus.RUNNING,
        description="Runs cdc_mirrors for a destination's tables as seldom as their freshness "
        "policy allows (once per period, whether the change log moved or not) and at once "
        "for a table never materialized.",
    )
    def mirror_refresh(
        context: SensorEvaluationContext, platform: PlatformResource
    ) -> SensorResult | SkipReason:
        try:
            configset = platform.load()
        except ConfigError as exc:
            return SkipReason(f"platform configuration unusable: {exc}")
        now = clock()
        requests, notes = [], []
        for name in sorted(set(configset.destinations) & set(tables)):
            keys = list(tables[name])
            if not keys:
                continue
            state = _state(context.instance, name, translator.changes_key(name), keys)
            wait = period(
                windows.get(name, 150.0),
                minimum_interval_seconds,
                DEFAULT_RUN_SECONDS if state.run_seconds is None else state.run_seconds,
                refresh_cap_seconds,
            )
            due, trigger, why = decide(
                state, now=now, refresh_after=wait, retry_after=retry_after_seconds
            )
            notes.append(f"{name}: {why}")
            if due:
                requests.append(
                    RunRequest(
                        asset_selection=keys,
                        asset_check_keys=[],  # not the reconciliation: it has its own schedule
                        tags={MIRROR_TAG: name, TRIGGER_TAG: trigger},
                    )
                )
        if not requests:
            return SkipReason("; ".join(notes) or "no destination has mirrors yet")
        context.log.info("; ".join(notes))
        return SensorResult(run_requests=requests)

    return mirror_refresh
