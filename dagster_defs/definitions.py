"""The one Definitions object of the code location."""

from __future__ import annotations

from pathlib import Path

from dagster import (
    AssetSelection,
    AutomationConditionSensorDefinition,
    DefaultSensorStatus,
    Definitions,
    define_asset_job,
)

from cdc_platform.config import load_config
from dagster_defs.assets import change_log_specs
from dagster_defs.cdc_job import cdc_destination
from dagster_defs.mirror_catch_up import build_mirror_catch_up
from dagster_defs.reconcile import build_reconcile_schedule, reconcile_checks, reconcile_job
from dagster_defs.resources import PlatformResource, default_conf_dir
from dagster_defs.sensors import build_config_monitor, build_running_monitor
from dagster_defs.spark_assets import SparkResource, daily_partitions, spark_assets

CONF_DIR = default_conf_dir()
_configset = load_config(Path(CONF_DIR))
_interval = _configset.platform.dagster.sensor_interval_seconds

daily_history_job = define_asset_job(
    "cdc_daily_history",
    selection=AssetSelection.groups("cdc_history"),
    partitions_def=daily_partitions(_configset),
    description="Daily change figures and as-of-day tables; backfill it over a date range.",
)

_checks = reconcile_checks(_configset)

defs = Definitions(
    assets=[*change_log_specs(_configset), *spark_assets(_configset)],
    asset_checks=_checks,
    jobs=[cdc_destination, daily_history_job, reconcile_job(_checks)],
    sensors=[
        build_reconcile_schedule(minimum_interval_seconds=max(_interval, 30)),
        build_mirror_catch_up(
            sorted({*_configset.destinations, *_configset.errors}),
            minimum_interval_seconds=max(_interval, 10),
        ),
        build_config_monitor(minimum_interval_seconds=_interval),
        build_running_monitor(minimum_interval_seconds=_interval),
        AutomationConditionSensorDefinition(
            "default_automation_condition_sensor",
            target=AssetSelection.all(),
            default_status=DefaultSensorStatus.RUNNING,
        ),
    ],
    resources={
        "platform": PlatformResource(conf_dir=CONF_DIR),
        "spark": SparkResource(conf_dir=CONF_DIR),
    },
)
