"""``mirror_refresh``: the one mechanism that keeps every mirror current and fresh.

Each tick, per destination, it compares two Delta versions of the change log: the newest one
its long-lived run reported (``delta_version`` of the change log's newest materialization) and
the one each mirror's newest materialization applied (``change_log_version``). A mirror behind
the change log gets a run of the ``cdc_mirrors`` job for the destination's tables, whatever
the source's pace: on a busy source every tick finds new commits, on a quiet one the last
commit is still caught (versions, unlike "updated since" events, cannot be missed while a
run is in progress). A destination whose mirrors are current is refreshed anyway once its
oldest mirror materialization is half the lag budget old, so the mirrors' freshness policy
(``lag_budget_seconds``) holds on an idle source too. So a change reaches its mirror within
about one sensor interval plus one run, and a mirror is materialized at least every half
budget.

It never requests while a mirrors run of the destination is queued or running, and waits
``retry_after_seconds`` after a failed one. Its skip reason says, per destination, which case
held (up to date at version N, run X in progress, waiting after a failure).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

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

__all__ = ["MirrorsState", "build_mirror_refresh", "decide"]


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
) -> tuple[bool, str]:
    """Whether to request the mirrors now, and why (or why not)."""
    blocked = _blocked(state, now, retry_after)
    if blocked is not None or state.changes_version is None:
        return False, blocked or ""
    never = sum(1 for v in state.applied_versions if v is None)
    if never:
        return True, f"{never} table(s) never materialized"
    applied = min(v for v in state.applied_versions if v is not None)
    if state.changes_version > applied:
        return True, f"change log at version {state.changes_version}, mirrors at {applied}"
    age = now - (state.oldest_materialized_at or now)
    if age >= refresh_after:
        return True, f"refresh: oldest mirror materialized {age:.0f} s ago"
    return False, (
        f"up to date at change-log version {state.changes_version}; "
        f"refresh in {refresh_after - age:.0f} s"
    )


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
    latest = instance.get_latest_materialization_events(keys)
    entries = [latest.get(k) for k in keys]
    times = [e.timestamp for e in entries if e is not None]
    return MirrorsState(
        changes_version=_int(instance.get_latest_materialization_event(changes), "delta_version"),
        applied_versions=[_int(e, CHANGE_LOG_VERSION) for e in entries],
        oldest_materialized_at=min(times) if len(times) == len(keys) else None,
        run_in_progress=live[0].run_id if live else None,
        failed_at=failed_at,
    )


def build_mirror_refresh(
    tables: Mapping[str, Sequence[AssetKey]],
    refresh_after: Mapping[str, float],
    *,
    minimum_interval_seconds: int = 10,
    retry_after_seconds: float = 60.0,
    clock: Callable[[], float] = time.time,
    translator: CdcTranslator = DEFAULT_TRANSLATOR,
) -> SensorDefinition:
    """The `mirror_refresh` sensor over each destination's mirror keys (``tables``);
    ``refresh_after`` is each destination's refresh period (half its lag budget)."""

    @sensor(
        name="mirror_refresh",
        job_name=MIRRORS_JOB,
        minimum_interval_seconds=minimum_interval_seconds,
        default_status=DefaultSensorStatus.RUNNING,
        description="Runs cdc_mirrors for a destination when its change log has commits its "
        "mirrors have not applied, and at least every half lag budget (freshness).",
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
            due, why = decide(
                state,
                now=now,
                refresh_after=refresh_after.get(name, 150.0),
                retry_after=retry_after_seconds,
            )
            notes.append(f"{name}: {why}")
            if due:
                requests.append(
                    RunRequest(
                        asset_selection=keys,
                        asset_check_keys=[],  # not the reconciliation: it has its own schedule
                        tags={MIRROR_TAG: name, "cdc/reason": why},
                    )
                )
        if not requests:
            return SkipReason("; ".join(notes) or "no destination has mirrors yet")
        context.log.info("; ".join(notes))
        return SensorResult(run_requests=requests)

    return mirror_refresh
