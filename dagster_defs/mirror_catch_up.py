"""A backstop for the mirrors' eager automation: no change-log commit is left unmirrored.

``AutomationCondition.eager()`` counts a dependency update that arrives while the mirror's
run is in progress as handled by that run, although the run started before it. On a busy
source the next commit triggers another run anyway; on a quiet one (or after a
reconciliation's repair, which commits once and stops) the last commits would stay out of the
mirrors until the next change. Seen in tests/integration/test_dagster_e2e.py.

``mirror_catch_up`` compares, per destination, the newest materialization of
``cdc/<dest>/changes`` with the start of the newest successful run that applied the
destination's mirrors (its step tags the run ``cdc/mirrors=<dest>``; a table whose apply
changed nothing is not materialized, so materializations alone cannot tell): a change-log
commit reported after that run started may be missing, so it requests every table of the
destination again (applies are idempotent; an extra one costs a no-op per table). It waits
``grace_seconds`` so eager automation gets the first chance, and never requests while a
mirrors run is queued or running.
"""

import time
from collections.abc import Callable, Mapping, Sequence, Set

from dagster import (
    AssetKey,
    AssetSelection,
    DagsterInstance,
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

from cdc_platform.errors import ConfigError
from dagster_defs.resources import PlatformResource
from dagster_defs.sensors import LIVE_STATUSES
from dagster_defs.table_assets import MIRROR_TAG
from dagster_defs.translator import DEFAULT_TRANSLATOR, CdcTranslator

__all__ = ["CATCH_UP_TAG", "build_mirror_catch_up", "needs_catch_up"]

CATCH_UP_TAG = "cdc/catch_up"
"""Run tag naming the destination whose mirrors a catch-up run materializes."""


def needs_catch_up(
    changes_at: float | None,
    mirrors_run_started_at: float | None,
    *,
    in_progress: bool,
    now: float,
    grace_seconds: float,
) -> bool:
    """Whether the mirrors may lack change-log commits and should be materialized again."""
    if changes_at is None or in_progress or now - changes_at < grace_seconds:
        return False
    return mirrors_run_started_at is None or changes_at > mirrors_run_started_at


def _mirrors_in_progress(instance: DagsterInstance, keys: Set[AssetKey]) -> bool:
    for run in instance.get_runs(filters=RunsFilter(statuses=LIVE_STATUSES)):
        if run.asset_selection and keys & run.asset_selection:
            return True
    return False


def _last_mirrors_run_started_at(instance: DagsterInstance, destination: str) -> float | None:
    records = instance.get_run_records(
        filters=RunsFilter(tags={MIRROR_TAG: destination}, statuses=[DagsterRunStatus.SUCCESS]),
        limit=1,
    )
    if not records:
        return None
    return records[0].start_time or records[0].create_timestamp.timestamp()


def build_mirror_catch_up(
    tables: Mapping[str, Sequence[AssetKey]],
    *,
    minimum_interval_seconds: int = 30,
    grace_seconds: float | None = None,
    clock: Callable[[], float] = time.time,
    translator: CdcTranslator = DEFAULT_TRANSLATOR,
) -> SensorDefinition:
    """The `mirror_catch_up` sensor; see the module docstring. ``tables`` names each
    destination's mirror asset keys."""
    all_keys = [key for keys in tables.values() for key in keys]
    grace = 2.0 * minimum_interval_seconds if grace_seconds is None else grace_seconds

    @sensor(
        name="mirror_catch_up",
        asset_selection=AssetSelection.assets(*all_keys),
        minimum_interval_seconds=minimum_interval_seconds,
        default_status=DefaultSensorStatus.RUNNING,
        description="Materializes a destination's mirrors again when change-log commits "
        "landed after its last mirrors run had started (eager automation may drop those).",
    )
    def mirror_catch_up(
        context: SensorEvaluationContext, platform: PlatformResource
    ) -> SensorResult | SkipReason:
        try:
            configset = platform.load()
        except ConfigError as exc:
            return SkipReason(f"platform configuration unusable: {exc}")
        instance = context.instance
        now = clock()
        requests = []
        for name in sorted(set(configset.destinations) & set(tables)):
            keys = list(tables[name])
            if not keys:
                continue
            changes = instance.get_latest_materialization_event(translator.changes_key(name))
            if needs_catch_up(
                changes.timestamp if changes else None,
                _last_mirrors_run_started_at(instance, name),
                in_progress=_mirrors_in_progress(instance, set(keys)),
                now=now,
                grace_seconds=grace,
            ):
                requests.append(
                    RunRequest(run_key=None, asset_selection=keys, tags={CATCH_UP_TAG: name})
                )
        if not requests:
            return SkipReason("every mirrors run started after its change log's last commit")
        return SensorResult(run_requests=requests)

    return mirror_catch_up
