"""Periodic full-list reconciliation: an asset check per table, its job and its sensor.

The check ``reconciled`` on each table's mirror ``cdc/<destination>/<db>/<table>`` asks
:meth:`CdcResource.reconcile <dagster_defs.resources.CdcResource.reconcile>` for the selected
tables (one destination's checks run together, one reconciliation): it compares each table
with its mirror and has the lease holder write repair events into the change log (the mirrors
then converge with their next run, requested by ``mirror_refresh``). Its result says what
was found and fixed.

``reconcile_sensor`` is a sensor rather than a cron schedule because each destination's next
run is due after a *random* 15-30 minutes (``reconcile.interval_minutes``), like SOFARegistry's
list loop; the due times live in the sensor's cursor. It launches a reconciliation only for a
destination whose long-lived run is live, i.e. where the lease is held (a stopped destination
is reconciled by hand: ``cdc-platform reconcile``). It was called ``reconcile_schedule``
before (a sensor named like a schedule); :data:`OLD_SENSOR_NAME` keeps that name known.
"""

import random
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from dagster import (
    AssetCheckKey,
    AssetCheckResult,
    AssetChecksDefinition,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetSelection,
    DefaultSensorStatus,
    MetadataValue,
    OpExecutionContext,
    RunRequest,
    RunsFilter,
    SensorDefinition,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    define_asset_job,
    in_process_executor,
    sensor,
)

from cdc_platform.config import ConfigSet
from cdc_platform.coordination.table_catalog import Catalog
from cdc_platform.errors import CdcError, ConfigError
from cdc_platform.reconcile.schedule import DueState
from cdc_platform.reconcile.service import ReconcileReport
from dagster_defs.check_carry import RECONCILED
from dagster_defs.resources import CdcResource, SparkResource
from dagster_defs.sensors import LIVE_STATUSES, live_runs
from dagster_defs.table_assets import op_name
from dagster_defs.table_checks import table_checks
from dagster_defs.translator import DEFAULT_TRANSLATOR, CdcTranslator

__all__ = [
    "CHECK_NAME",
    "OLD_SENSOR_NAME",
    "RECONCILE_JOB",
    "RECONCILE_TAG",
    "SENSOR_NAME",
    "build_reconcile_schedule",
    "build_reconcile_sensor",
    "check_keys",
    "reconcile_checks",
    "reconcile_job",
]

CHECK_NAME = RECONCILED
RECONCILE_JOB = "cdc_reconcile"
SENSOR_NAME = "reconcile_sensor"
OLD_SENSOR_NAME = "reconcile_schedule"
"""Its name before issue 44.7: Dagster keeps a sensor's state (cursor, stopped or running)
by name, so the renamed sensor starts fresh (docs/dagster.md)."""
RECONCILE_TAG = "cdc/reconcile"
"""Tag naming the destination of a reconciliation run (not `cdc/destination`: its
concurrency limit of one belongs to the long-lived run, which must keep running)."""


def check_keys(
    destination: str, catalog: Catalog, translator: CdcTranslator = DEFAULT_TRANSLATOR
) -> list[AssetCheckKey]:
    """The reconciliation checks of one destination, one on each table's mirror."""
    return [
        AssetCheckKey(translator.table_key(destination, t.db, t.table), CHECK_NAME)
        for t in catalog.tables
    ]


def _numbers(summary: Mapping[str, Any]) -> dict[str, MetadataValue[Any] | int | float]:
    return {
        key: value
        for key, value in summary.items()
        if isinstance(value, int | float) and not isinstance(value, bool)
    }


def _table_result(key: AssetCheckKey, name: str, report: ReconcileReport) -> AssetCheckResult:
    """One table's verdict within the destination's reconciliation."""
    repair = report.repair
    if name in report.skipped_tables:
        return AssetCheckResult(
            asset_key=key.asset_key,
            check_name=key.name,
            passed=True,
            description=f"not compared: {report.skipped_tables[name]}",
            metadata={"status": MetadataValue.text("skipped")},
        )
    found = [t for t in report.tables if t.name == name]
    if not found:
        return AssetCheckResult(
            asset_key=key.asset_key,
            check_name=key.name,
            passed=report.status != "not_repaired",
            severity=AssetCheckSeverity.ERROR,
            description=f"not compared ({report.status}): {report.message or 'no result'}",
            metadata={"status": MetadataValue.text(report.status)},
        )
    table = found[0]
    metadata = _numbers(table.summary())
    upserts = repair.upserts.get(name, 0) if repair else 0
    deletes = repair.deletes.get(name, 0) if repair else 0
    fixed = upserts + deletes
    metadata.update(
        differences=table.differences,
        repaired=fixed,
        repair_upserts=upserts,
        repair_deletes=deletes,
    )
    metadata["status"] = MetadataValue.text(report.status)
    metadata["repaired_by"] = MetadataValue.text(report.repaired_by or "-")
    if report.status == "not_repaired" and table.differences:
        return AssetCheckResult(
            asset_key=key.asset_key,
            check_name=key.name,
            passed=False,
            severity=AssetCheckSeverity.ERROR,
            description=f"{table.differences} differences found, not repaired: {report.message}",
            metadata=metadata,
        )
    if fixed:
        return AssetCheckResult(
            asset_key=key.asset_key,
            check_name=key.name,
            passed=False,
            severity=AssetCheckSeverity.WARN,
            description=f"{fixed} rows differed and were repaired through the change log; "
            "the mirror converges on its next materialization",
            metadata=metadata,
        )
    lagged = f" ({table.differences} rows only lagged)" if table.differences else ""
    return AssetCheckResult(
        asset_key=key.asset_key,
        check_name=key.name,
        passed=True,
        description=f"source and mirror agree{lagged}",
        metadata=metadata,
    )


def _checks(destination: str, catalog: Catalog, translator: CdcTranslator) -> AssetChecksDefinition:
    keys = check_keys(destination, catalog, translator)
    names = {key: table.name for key, table in zip(keys, catalog.tables, strict=True)}

    @table_checks(
        name=op_name("cdc_reconcile", destination),
        specs=[
            AssetCheckSpec(
                CHECK_NAME,
                asset=key.asset_key,
                blocking=False,
                description=f"Full-list reconciliation of {names[key]} ({destination}): the "
                "table compared with its mirror by chunk checksums; differences are repaired "
                "by events written into the change log by the lease holder. Fails (WARN) when "
                "differences were found and repaired, (ERROR) when they could not be.",
            )
            for key in keys
        ],
        tables=catalog.tables,
    )
    def reconciled(
        context: OpExecutionContext, platform: CdcResource, spark: SparkResource
    ) -> Iterator[AssetCheckResult]:
        selected = [k for k in keys if k in context.selected_asset_check_keys]
        try:
            report = platform.reconcile(spark.session(), destination, [names[k] for k in selected])
        except CdcError as exc:
            # A source or lake that cannot be reached fails the checks, not the run: a mirror
            # materialized with its checks (the CLI, the UI) still counts as materialized.
            context.log.error(f"{destination}: reconciliation not possible: {exc}")
            for key in selected:
                yield AssetCheckResult(
                    asset_key=key.asset_key,
                    check_name=key.name,
                    passed=False,
                    severity=AssetCheckSeverity.ERROR,
                    description=f"reconciliation not possible: {exc}",
                    metadata={"status": MetadataValue.text("not_run")},
                )
            return
        for table in report.tables:
            context.log.info(f"{table.name}: {table.summary()}")
        for key in selected:
            yield _table_result(key, names[key], report)

    return reconciled


def reconcile_checks(
    configset: ConfigSet,
    catalogs: Mapping[str, Catalog],
    translator: CdcTranslator = DEFAULT_TRANSLATOR,
) -> list[AssetChecksDefinition]:
    """Per valid destination with known tables, its `reconciled` checks (one per table)."""
    return [
        _checks(name, catalogs[name], translator)
        for name in sorted(configset.destinations)
        if name in catalogs and catalogs[name].tables
    ]


def reconcile_job(checks: list[AssetChecksDefinition]) -> Any:
    """The job the sensor launches (one destination's check per run).

    Typed ``Any``: Dagster's public API does not name the type of an asset job.
    """
    return define_asset_job(
        RECONCILE_JOB,
        selection=AssetSelection.checks(*checks) if checks else AssetSelection.assets(),
        description="Full-list reconciliation of destinations against their mirrors.",
        executor_def=in_process_executor,  # one Spark session per run, not one per step
    )


def build_reconcile_sensor(
    *,
    minimum_interval_seconds: int = 60,
    clock: Callable[[], float] = time.time,
    rand: Callable[[], float] = random.random,
    checks: Mapping[str, Sequence[AssetCheckKey]] | None = None,
) -> SensorDefinition:
    """The `reconcile_sensor` sensor; see the module docstring. ``checks`` names each
    destination's check keys (a destination without any is skipped)."""
    by_destination = dict(checks or {})

    @sensor(
        name=SENSOR_NAME,
        job_name=RECONCILE_JOB,
        minimum_interval_seconds=minimum_interval_seconds,
        default_status=DefaultSensorStatus.RUNNING,
        description="Launches each destination's reconciliation after a random 15-30 min "
        "(reconcile.interval_minutes), where its lease is held.",
    )
    def reconcile_sensor(
        context: SensorEvaluationContext, platform: CdcResource
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
            if not by_destination.get(name):
                notes.append(f"{name}: no known table to reconcile (reload the definitions)")
                continue
            requests.append(
                RunRequest(
                    run_key=None,
                    asset_check_keys=list(by_destination[name]),
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

    return reconcile_sensor


build_reconcile_schedule = build_reconcile_sensor
"""The former name of :func:`build_reconcile_sensor` (kept for code that imports it)."""
