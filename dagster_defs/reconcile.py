"""Scheduled full-list reconciliation: an asset check per destination, its job and schedule.

The check ``reconciled`` on ``cdc/<destination>/mirrors`` runs
:func:`cdc_platform.reconcile.service.reconcile_destination`: it compares every captured
table with its mirror and has the lease holder write repair events into the change log (the
mirrors then converge through their normal, eager materialization). Its result says what was
found and fixed.

``reconcile_schedule`` is a sensor rather than a cron schedule because each destination's
next run is due after a *random* 15-30 minutes (``reconcile.interval_minutes``), like
SOFARegistry's list loop; the due times live in the sensor's cursor. It launches a
reconciliation only for a destination whose long-lived run is live, i.e. where the lease is
held (a stopped destination is reconciled by hand: ``cdc-platform reconcile``).
"""

import random
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from dagster import (
    AssetCheckExecutionContext,
    AssetCheckKey,
    AssetCheckResult,
    AssetChecksDefinition,
    AssetCheckSeverity,
    AssetSelection,
    DefaultSensorStatus,
    MetadataValue,
    RunRequest,
    RunsFilter,
    SensorDefinition,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    asset_check,
    define_asset_job,
    sensor,
)

from cdc_platform.config import ConfigSet
from cdc_platform.errors import ConfigError
from cdc_platform.reconcile.schedule import DueState
from cdc_platform.reconcile.service import reconcile_destination
from dagster_defs.resources import PlatformResource, SparkResource
from dagster_defs.sensors import LIVE_STATUSES, live_runs
from dagster_defs.translator import DEFAULT_TRANSLATOR, CdcTranslator, destination_names

__all__ = [
    "CHECK_NAME",
    "RECONCILE_JOB",
    "RECONCILE_TAG",
    "build_reconcile_schedule",
    "reconcile_checks",
    "reconcile_job",
]

CHECK_NAME = "reconciled"
RECONCILE_JOB = "cdc_reconcile"
RECONCILE_TAG = "cdc/reconcile"
"""Tag naming the destination of a reconciliation run (not `cdc/destination`: its
concurrency limit of one belongs to the long-lived run, which must keep running)."""


def check_key(destination: str, translator: CdcTranslator = DEFAULT_TRANSLATOR) -> AssetCheckKey:
    """The reconciliation check of one destination, on its mirrors asset."""
    return AssetCheckKey(translator.mirrors_key(destination), CHECK_NAME)


def _check(destination: str, translator: CdcTranslator) -> AssetChecksDefinition:
    @asset_check(
        asset=translator.mirrors_key(destination),
        name=CHECK_NAME,
        blocking=False,
        description=f"Full-list reconciliation of {destination}: every captured table compared "
        "with its mirror by chunk checksums; differences are repaired by events written into "
        "the change log by the lease holder. Fails (WARN) when differences were found and "
        "repaired, (ERROR) when they could not be repaired.",
    )
    def reconciled(
        context: AssetCheckExecutionContext, platform: PlatformResource, spark: SparkResource
    ) -> AssetCheckResult:
        configset = platform.load()
        session = spark.session()
        report = reconcile_destination(configset, destination, session)
        meta = report.metadata()
        for table in report.tables:
            context.log.info(f"{table.name}: {table.summary()}")
        metadata: dict[str, MetadataValue[Any] | int | float] = {
            key: value
            for key, value in meta.items()
            if isinstance(value, int | float) and not isinstance(value, bool)
        }
        metadata.update(
            {
                "status": MetadataValue.text(report.status),
                "repaired_by": MetadataValue.text(report.repaired_by or "-"),
                "tables": MetadataValue.json(meta["tables"]),
                "skipped_tables": MetadataValue.json(report.skipped_tables),
            }
        )
        if report.status == "not_repaired":
            description = f"{report.differences} differences found, not repaired: {report.message}"
            return AssetCheckResult(
                passed=False,
                severity=AssetCheckSeverity.ERROR,
                description=description,
                metadata=metadata,
            )
        if report.repaired:
            return AssetCheckResult(
                passed=False,
                severity=AssetCheckSeverity.WARN,
                description=f"{report.repaired} rows differed and were repaired through the "
                "change log; the mirrors converge on their next materialization",
                metadata=metadata,
            )
        lagged = f" ({report.differences} rows only lagged)" if report.differences else ""
        return AssetCheckResult(
            passed=True, description=f"source and mirrors agree{lagged}", metadata=metadata
        )

    return reconciled


def reconcile_checks(
    configset: ConfigSet, translator: CdcTranslator = DEFAULT_TRANSLATOR
) -> list[AssetChecksDefinition]:
    """One `reconciled` check per configured destination (invalid ones too, like the assets)."""
    return [_check(name, translator) for name in destination_names(configset)]


def reconcile_job(checks: list[AssetChecksDefinition]) -> Any:
    """The job the schedule launches (one destination's check per run).

    Typed ``Any``: Dagster's public API does not name the type of an asset job.
    """
    return define_asset_job(
        RECONCILE_JOB,
        selection=AssetSelection.checks(*checks) if checks else AssetSelection.keys(),
        description="Full-list reconciliation of destinations against their mirrors.",
    )


def build_reconcile_schedule(
    *,
    minimum_interval_seconds: int = 60,
    clock: Callable[[], float] = time.time,
    rand: Callable[[], float] = random.random,
    translator: CdcTranslator = DEFAULT_TRANSLATOR,
) -> SensorDefinition:
    """The `reconcile_schedule` sensor; see the module docstring."""

    @sensor(
        name="reconcile_schedule",
        job_name=RECONCILE_JOB,
        minimum_interval_seconds=minimum_interval_seconds,
        default_status=DefaultSensorStatus.RUNNING,
        description="Launches each destination's reconciliation after a random 15-30 min "
        "(reconcile.interval_minutes), where its lease is held.",
    )
    def reconcile_schedule(
        context: SensorEvaluationContext, platform: PlatformResource
    ) -> SensorResult | SkipReason:
        try:
            configset = platform.load()
        except ConfigError as exc:
            return SkipReason(f"platform configuration unusable: {exc}")
        settings = configset.platform.reconcile
        if not settings.enabled:
            return SkipReason("reconcile.enabled is false in platform.yaml")
        state = DueState.from_cursor(context.cursor)
        now = clock()
        enabled = [
            n
            for n, d in configset.destinations.items()
            if d.config.enabled and d.config.source.mode == "binlog"
        ]
        ready = state.due(enabled, now, settings.interval_minutes, rand)
        streaming = live_runs(context)
        running: dict[str, int] = defaultdict(int)
        for run in context.instance.get_runs(
            filters=RunsFilter(job_name=RECONCILE_JOB, statuses=LIVE_STATUSES)
        ):
            running[run.tags.get(RECONCILE_TAG, "")] += 1
        requests, notes = [], []
        for name in ready:
            if running[name]:
                notes.append(f"{name}: a reconciliation is still running")
                continue
            state.reschedule(name, now, settings.interval_minutes, rand)
            if not streaming.get(name):
                notes.append(f"{name}: not streaming (no lease holder run); skipped this time")
                continue
            requests.append(
                RunRequest(
                    run_key=None,
                    asset_check_keys=[check_key(name, translator)],
                    tags={RECONCILE_TAG: name},
                )
            )
        for note in notes:
            context.log.info(note)
        if not requests:
            upcoming = ", ".join(
                f"{n} in {max(0.0, due - now) / 60:.1f} min"
                for n, due in sorted(state.next_due.items())
            )
            return SensorResult(
                skip_reason=SkipReason("; ".join(notes) or f"next: {upcoming or 'none'}"),
                cursor=state.to_cursor(),
            )
        return SensorResult(run_requests=requests, cursor=state.to_cursor())

    return reconcile_schedule
