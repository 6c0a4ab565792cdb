"""``daily_history_schedule``: materializes each finished UTC day of every table's history.

The history's partitions run through today (a partial day, refreshed when rematerialized), so
Dagster's "latest partition" is the day still running; this schedule requests the day that
ended instead, once per day, one run per destination (a destination whose source is down does
not hold the others' history back). It runs after midnight UTC by the largest lag budget of
the destinations plus a minute: by then the day's last changes have reached the change log
(the budget is what the change log's lag check holds it to), so the day is complete.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import timedelta

from dagster import (
    AssetKey,
    DefaultScheduleStatus,
    RunRequest,
    ScheduleDefinition,
    ScheduleEvaluationContext,
    SkipReason,
    schedule,
)

__all__ = ["HISTORY_TAG", "build_history_schedule", "history_cron"]

HISTORY_TAG = "cdc/history"
"""Run tag: the destination whose history the run materializes."""


def history_cron(max_budget_seconds: float) -> str:
    """Daily, ``max_budget_seconds`` plus a minute after midnight (at most 23:59)."""
    minutes = min(23 * 60 + 59, math.ceil(max_budget_seconds / 60) + 1)
    return f"{minutes % 60} {minutes // 60} * * *"


def build_history_schedule(
    job_name: str, keys: Mapping[str, Sequence[AssetKey]], max_budget_seconds: float
) -> ScheduleDefinition:
    """The schedule of ``job_name`` (the daily-history job) over each destination's history
    ``keys``."""

    @schedule(
        name="daily_history_schedule",
        job_name=job_name,
        cron_schedule=history_cron(max_budget_seconds),
        execution_timezone="UTC",
        default_status=DefaultScheduleStatus.RUNNING,
        description="Materializes the daily history of the UTC day that just ended, one run "
        "per destination (past days: a backfill of cdc_daily_history).",
    )
    def daily_history_schedule(
        context: ScheduleEvaluationContext,
    ) -> list[RunRequest] | SkipReason:
        tick = context.scheduled_execution_time
        day = (tick - timedelta(days=1)).date().isoformat()
        requests = [
            RunRequest(
                run_key=f"{name}:{day}",
                partition_key=day,
                asset_selection=list(selected),
                tags={HISTORY_TAG: name},
            )
            for name, selected in sorted(keys.items())
            if selected
        ]
        return requests or SkipReason("no destination has tables yet")

    return daily_history_schedule
