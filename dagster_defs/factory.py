"""``build_definitions``: everything the platform defines for Dagster, for any code location.

A user's project merges it with its own definitions::

    defs = dg.Definitions.merge(build_definitions("conf"), dg.Definitions(assets=[my_asset]))

Each destination's tables come from its catalog (the source's captured tables and the change
log's, :func:`cdc_platform.coordination.table_catalog.discover_tables`), read when the
definitions load: a source that is down costs at most a few seconds and leaves the tables
the change log knows. ``catalogs`` skips discovery (the Component passes its cached state).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from dagster import (
    AssetKey,
    AssetsDefinition,
    AssetSelection,
    AssetSpec,
    DagsterInvalidDefinitionError,
    Definitions,
    SensorDefinition,
    define_asset_job,
    in_process_executor,
)

from cdc_platform.config import ConfigSet, load_config
from cdc_platform.coordination.table_catalog import Catalog, discover_tables, without_transient
from dagster_defs.alerts import build_run_failure_alert
from dagster_defs.assets import change_log_specs
from dagster_defs.cdc_job import build_cdc_destination_job
from dagster_defs.freshness import change_log_lag_checks
from dagster_defs.history_schedule import build_history_schedule
from dagster_defs.io_manager import MIRROR_IO_MANAGER, MirrorIOManager
from dagster_defs.mirror_refresh import build_mirror_refresh
from dagster_defs.reconcile import (
    build_reconcile_sensor,
    check_keys,
    reconcile_checks,
    reconcile_job,
)
from dagster_defs.resources import PlatformResource, SparkResource
from dagster_defs.sensors import build_config_monitor, build_running_monitor
from dagster_defs.snapshot_request import snapshot_request_job
from dagster_defs.spark_assets import history_assets
from dagster_defs.table_assets import MIRRORS_JOB, mirror_assets
from dagster_defs.translator import DEFAULT_TRANSLATOR, CdcTranslator, destination_names

__all__ = ["DAILY_HISTORY_JOB", "build_definitions", "discover_catalogs"]

DAILY_HISTORY_JOB = "cdc_daily_history"

log = logging.getLogger(__name__)


def discover_catalogs(configset: ConfigSet, *, use_source: bool = True) -> dict[str, Catalog]:
    """Every valid destination's catalog, read side by side (a source that is down costs its
    connect timeout once, not once per destination)."""
    names = sorted(configset.destinations)
    if not names:
        return {}
    with ThreadPoolExecutor(max_workers=min(8, len(names))) as pool:
        found = pool.map(lambda n: discover_tables(configset, n, use_source=use_source), names)
        catalogs = dict(zip(names, found, strict=True))
    for name, catalog in catalogs.items():
        for problem in catalog.problems:
            log.warning("%s: tables listed without it: %s", name, problem)
    return catalogs


def build_definitions(
    conf_dir: str,
    *,
    translator: CdcTranslator | None = None,
    catalogs: Mapping[str, Catalog] | None = None,
) -> Definitions:
    """Jobs, sensors, assets, checks and resources of the destinations under ``conf_dir``.

    ``translator`` names every asset (default :data:`DEFAULT_TRANSLATOR`); ``catalogs`` gives
    each destination's tables instead of discovering them now.
    """
    conf_dir = str(Path(conf_dir).resolve())
    configset = load_config(Path(conf_dir))
    translator = (translator or DEFAULT_TRANSLATOR).configured(configset.platform.dagster)
    if catalogs is None:
        catalogs = discover_catalogs(configset)
    catalogs = {  # a cached catalog may name a schema tool's transient tables: never assets
        name: without_transient(catalog, configset.destinations[name].config.source)
        for name, catalog in catalogs.items()
        if name in configset.destinations
    }
    interval = configset.platform.dagster.sensor_interval_seconds
    mirrors_of = {
        name: a
        for name in sorted(configset.destinations)
        if name in catalogs
        and (a := mirror_assets(configset, name, catalogs[name], translator)) is not None
    }
    mirrors = list(mirrors_of.values())
    tables: dict[str, list[AssetKey]] = {
        name: [translator.table_key(name, t.db, t.table) for t in catalogs[name].tables]
        for name in sorted(configset.destinations)
        if name in catalogs
    }
    mirror_keys = [k for keys in tables.values() for k in keys]
    mirror_jobs = [  # a job must select something
        define_asset_job(
            MIRRORS_JOB,
            selection=AssetSelection.assets(*mirror_keys).without_checks(),
            executor_def=in_process_executor,  # one step: no step subprocess
            description="Applies the change log to the selected mirrors (requested by "
            "mirror_refresh; any subset, from the UI too).",
        )
        for _ in mirror_keys[:1]
    ]
    mirror_sensors: list[SensorDefinition] = []
    if mirror_keys:
        mirror_sensors.append(
            build_mirror_refresh(
                tables,
                _windows(mirrors_of),
                minimum_interval_seconds=max(interval, 5),
                refresh_cap_seconds=configset.platform.dagster.mirror_refresh_seconds,
                translator=translator,
            )
        )
    checks = reconcile_checks(configset, catalogs, translator)
    history = history_assets(configset, catalogs, translator)
    history_job = define_asset_job(
        DAILY_HISTORY_JOB,
        selection=AssetSelection.assets(*[key for a in history for key in a.keys]),
        description="Daily change figures and as-of-day tables; backfill it over a date range.",
        executor_def=in_process_executor,  # one Spark session per run, not one per step
    )
    change_logs = {translator.changes_key(n): n for n in destination_names(configset)}
    changes = [
        _owned(spec, change_logs, translator, catalogs)
        for spec in change_log_specs(configset, translator)
    ]
    _unique_keys([*changes, *mirrors, *history])
    history_keys = {
        name: [translator.table_history_key(name, t.db, t.table) for t in catalogs[name].tables]
        for name in sorted(configset.destinations)
        if name in catalogs and catalogs[name].tables
    }
    return Definitions(
        assets=[*changes, *mirrors, *history],
        schedules=[
            build_history_schedule(
                DAILY_HISTORY_JOB,
                history_keys,
                max(
                    (d.config.lag_budget_seconds for d in configset.destinations.values()),
                    default=300.0,
                ),
            )
        ]
        if history
        else [],
        asset_checks=[*checks, *change_log_lag_checks(configset, translator)],
        jobs=[
            build_cdc_destination_job(translator),
            history_job,
            reconcile_job(checks),
            snapshot_request_job,
            *mirror_jobs,
        ],
        sensors=[
            build_reconcile_sensor(
                # every 30 s at most (a reconciliation is due every 15-30 min by default), but
                # never less often than the shortest reconcile interval configured
                minimum_interval_seconds=max(
                    interval,
                    min(30, math.ceil(configset.platform.reconcile.interval_minutes[0] * 60)),
                ),
                checks={
                    name: check_keys(name, catalogs[name], translator)
                    for name in configset.destinations
                    if name in catalogs
                },
            ),
            *mirror_sensors,
            build_config_monitor(minimum_interval_seconds=interval),
            build_running_monitor(minimum_interval_seconds=interval, translator=translator),
            build_run_failure_alert(minimum_interval_seconds=interval),
        ],
        resources={
            "platform": PlatformResource(conf_dir=conf_dir),
            "spark": SparkResource(conf_dir=conf_dir),
            MIRROR_IO_MANAGER: MirrorIOManager(conf_dir=conf_dir),
        },
    )


def _windows(mirrors: Mapping[str, AssetsDefinition]) -> dict[str, float]:
    """Per destination, the shortest freshness window of its mirrors (warn, else fail) in
    seconds: what the mirror refresh must keep (a translator may have set its own policy)."""
    windows: dict[str, float] = {}
    for name, assets in mirrors.items():
        for spec in assets.specs:
            # a time-window policy (Dagster's; others are not kept by a refresh period)
            window = getattr(spec.freshness_policy, "warn_window", None) or getattr(
                spec.freshness_policy, "fail_window", None
            )
            if window is not None:
                seconds = float(window.to_timedelta().total_seconds())
                windows[name] = min(windows.get(name, math.inf), seconds)
    return windows


def _owned(
    spec: AssetSpec | AssetsDefinition,
    change_logs: Mapping[AssetKey, str],
    translator: CdcTranslator,
    catalogs: Mapping[str, Catalog],
) -> AssetSpec | AssetsDefinition:
    """A change log with its destination's owners and its source's kind beside its own."""

    def own(one: AssetSpec) -> AssetSpec:
        name = change_logs.get(one.key)
        if name is None:
            return one
        kind = catalogs[name].source_kind if name in catalogs else ""
        owners = [*one.owners, *(o for o in translator.owners(name) if o not in one.owners)]
        kinds = {*one.kinds, translator.source_kind(name, kind)}
        return one.replace_attributes(owners=owners, kinds=kinds)

    return own(spec) if isinstance(spec, AssetSpec) else spec.map_asset_specs(own)


def _unique_keys(assets: Sequence[AssetSpec | AssetsDefinition]) -> None:
    """Refuse two assets on one key, naming the way out (Dagster's own error names neither)."""
    seen: set[AssetKey] = set()
    for item in assets:
        for key in [item.key] if isinstance(item, AssetSpec) else item.keys:
            if key in seen:
                raise DagsterInvalidDefinitionError(
                    f"two assets get the key {key.to_user_string()} (a table named like "
                    "another table's daily history?): set dagster.key_style: legacy in "
                    "platform.yaml, or override CdcTranslator.table_key / table_history_key"
                )
            seen.add(key)
