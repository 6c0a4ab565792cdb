"""The change log's lag check, against the destination's budget.

``lag_within_budget`` on ``cdc/<destination>/changes`` reads the lag the lease holder last
published (the state watch, as ``cdc-platform status`` shows it), else the newest change-log
materialization's ``lag_seconds``, and fails (ERROR) when it exceeds ``lag_budget_seconds``
of the destination's instance.yaml, (WARN) when no lag is known yet.

Dagster counts a check only when its newest evaluation targets the asset's newest
materialization (otherwise the UI reads "Not evaluated"). So the long-lived run that
materializes the change log evaluates it with every materialization, in the same run
(:func:`lag_evaluation`, ``dagster_defs.cdc_job``); the ``running_monitor`` sensor evaluates
it only for a destination without a live run (a runless evaluation would hide the run's:
Dagster shows the newest evaluation), so a change log whose run is gone turns red by itself.
The check's own op runs it on demand from the UI. The change log and the mirrors share one
``FreshnessPolicy`` (:func:`freshness_policy`).
"""

import time
from dataclasses import dataclass
from datetime import timedelta

from dagster import (
    AssetCheckEvaluation,
    AssetCheckExecutionContext,
    AssetCheckResult,
    AssetChecksDefinition,
    AssetCheckSeverity,
    AssetKey,
    FreshnessPolicy,
    asset_check,
)

from cdc_platform.config import ConfigSet
from cdc_platform.coordination.status import collect_status
from cdc_platform.errors import CdcError
from dagster_defs.resources import PlatformResource
from dagster_defs.translator import DEFAULT_TRANSLATOR, CdcTranslator

__all__ = [
    "LAG_CHECK",
    "LAG_REPORT_SECONDS",
    "LagVerdict",
    "change_log_lag_checks",
    "freshness_policy",
    "judge_lag",
    "lag_evaluation",
]

LAG_CHECK = "lag_within_budget"
LAG_REPORT_SECONDS = 60.0
"""How often the running monitor records the lag check when its verdict stays the same."""


def freshness_policy(budget_seconds: float) -> FreshnessPolicy:
    """Fail when the asset was not materialized for the lag budget (Dagster's floor: 60 s);
    warn after half of it rounded down to whole minutes, when that is a minute or more.

    Whole minutes because Dagster's UI shows a window in minutes, rounded: a 150 s window
    read "3 minutes" while the asset turned WARN after 2.5."""
    fail = max(60.0, budget_seconds)
    warn = 60.0 * int(fail / 2 // 60)
    return FreshnessPolicy.time_window(
        fail_window=timedelta(seconds=fail),
        warn_window=timedelta(seconds=warn) if warn >= 60 else None,
    )


@dataclass(frozen=True, slots=True)
class LagVerdict:
    """A lag check's outcome."""

    passed: bool
    severity: AssetCheckSeverity
    description: str


def judge_lag(lag_seconds: float | None, budget_seconds: float, source: str) -> LagVerdict:
    """Pass when the lag is known and within the budget."""
    if lag_seconds is None:
        return LagVerdict(False, AssetCheckSeverity.WARN, "no lag known yet (nothing committed)")
    if lag_seconds > budget_seconds:
        return LagVerdict(
            False,
            AssetCheckSeverity.ERROR,
            f"lag {lag_seconds:.1f} s over the budget of {budget_seconds:.0f} s ({source})",
        )
    return LagVerdict(
        True,
        AssetCheckSeverity.ERROR,
        f"lag {lag_seconds:.1f} s within {budget_seconds:.0f} s ({source})",
    )


def lag_evaluation(
    key: AssetKey, lag_seconds: float | None, budget_seconds: float, source: str
) -> AssetCheckEvaluation:
    """The lag check's result, recorded without a run (by a sensor)."""
    verdict = judge_lag(lag_seconds, budget_seconds, source)
    metadata: dict[str, float] = {"budget_seconds": budget_seconds}
    if lag_seconds is not None:
        metadata["lag_seconds"] = round(lag_seconds, 3)
    return AssetCheckEvaluation(
        asset_key=key,
        check_name=LAG_CHECK,
        passed=verdict.passed,
        severity=verdict.severity,
        description=verdict.description,
        metadata=metadata,
    )


def _check(destination: str, translator: CdcTranslator) -> AssetChecksDefinition:
    key = translator.changes_key(destination)

    @asset_check(
        asset=key,
        name=LAG_CHECK,
        description=f"Change-log lag of {destination} within its lag_budget_seconds.",
    )
    def lag_within_budget(
        context: AssetCheckExecutionContext, platform: PlatformResource
    ) -> AssetCheckResult:
        configset = platform.load()
        budget = configset.destinations[destination].config.lag_budget_seconds
        lag: float | None = None
        source = "lease holder's status"
        committed_at: float | None = None
        try:
            (status,) = collect_status(configset, [destination])
            lag, committed_at = status.lag_seconds, status.committed_at
        except (CdcError, ValueError) as exc:
            context.log.warning(f"{destination}: status unavailable ({exc})")
        if lag is None:
            event = context.instance.get_latest_materialization_event(key)
            materialization = event.asset_materialization if event else None
            value = materialization.metadata.get("lag_seconds") if materialization else None
            if value is not None and isinstance(value.value, int | float):
                lag, source = float(value.value), "newest materialization"
                committed_at = event.timestamp if event else None
        verdict = judge_lag(lag, budget, source)
        metadata: dict[str, float] = {"budget_seconds": budget}
        if lag is not None:
            metadata["lag_seconds"] = round(lag, 3)
        if committed_at is not None:
            metadata["seconds_since_commit"] = round(time.time() - committed_at, 1)
        return AssetCheckResult(
            passed=verdict.passed,
            severity=verdict.severity,
            description=verdict.description,
            metadata=metadata,
        )

    return lag_within_budget


def change_log_lag_checks(
    configset: ConfigSet, translator: CdcTranslator = DEFAULT_TRANSLATOR
) -> list[AssetChecksDefinition]:
    """One lag check per valid destination."""
    return [_check(name, translator) for name in sorted(configset.destinations)]
