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
from dagster_defs.cdc_job import build_cdc_destination_job
from dagster_defs.mirror_catch_up import build_mirror_catch_up
from dagster_defs.reconcile import build_reconcile_schedule, reconcile_checks, reconcile_job
from dagster_defs.resources import PlatformResource, SparkResource, default_conf_dir
from dagster_defs.sensors import build_config_monitor, build_running_monitor
from dagster_defs.spark_assets import daily_partitions, spark_assets
from dagster_defs.translator import DEFAULT_TRANSLATOR, destination_names

CONF_DIR = default_conf_dir()
TRANSLATOR = DEFAULT_TRANSLATOR
_configset = load_config(Path(CONF_DIR))
_names = destination_names(_configset)
_interval = _configset.platform.dagster.sensor_interval_seconds

daily_history_job = define_asset_job(
    "cdc_daily_history",
    selection=AssetSelection.assets(*[TRANSLATOR.history_key(name) for name in _names]),
    partitions_def=daily_partitions(_configset),
    description="Daily change figures and as-of-day tables; backfill it over a date range.",
)

_checks = reconcile_checks(_configset, TRANSLATOR)

defs = Definitions(
    assets=[*change_log_specs(_configset, TRANSLATOR), *spark_assets(_configset, TRANSLATOR)],
    asset_checks=_checks,
    jobs=[build_cdc_destination_job(TRANSLATOR), daily_history_job, reconcile_job(_checks)],
    sensors=[
        build_reconcile_schedule(
            minimum_interval_seconds=max(_interval, 30), translator=TRANSLATOR
        ),
        build_mirror_catch_up(
            _names, minimum_interval_seconds=max(_interval, 10), translator=TRANSLATOR
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
