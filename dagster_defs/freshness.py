"""Freshness checks: the change log's lag, and each mirror's delay, against the destination's
budget.

``lag_within_budget`` on ``cdc/<destination>/changes`` reads the lag the lease holder last
published (the state watch, as ``cdc-platform status`` shows it), else the newest change-log
materialization's ``lag_seconds``, and fails (ERROR) when it exceeds ``lag_budget_seconds``
of the destination's instance.yaml, (WARN) when no lag is known yet.

``fresh`` on each table's mirror fails (ERROR) when a change of the table has waited in the
change log, unapplied, longer than the same budget (:mod:`cdc_platform.spark.freshness`; an
idle table stays fresh). Both run every ``CHECK_CRON`` tick through declarative automation, and
on demand from the UI.
"""

import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from dagster import (
    AssetCheckExecutionContext,
    AssetCheckKey,
    AssetCheckResult,
    AssetChecksDefinition,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetKey,
    AutomationCondition,
    OpExecutionContext,
    asset_check,
)

from cdc_platform.config import ConfigSet
from cdc_platform.coordination.status import collect_status
from cdc_platform.errors import CdcError
from cdc_platform.spark.catalog import Catalog
from cdc_platform.spark.freshness import mirror_freshness
from dagster_defs.resources import PlatformResource
from dagster_defs.table_assets import op_name
from dagster_defs.table_checks import table_checks
from dagster_defs.translator import DEFAULT_TRANSLATOR, CdcTranslator

__all__ = [
    "CHECK_CRON",
    "FRESH_CHECK",
    "LAG_CHECK",
    "LagVerdict",
    "change_log_lag_checks",
    "judge_lag",
    "mirror_freshness_checks",
]

LAG_CHECK = "lag_within_budget"
FRESH_CHECK = "fresh"
CHECK_CRON = "*/5 * * * *"


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


_EVERY_TICK: AutomationCondition[AssetKey | AssetCheckKey]
_EVERY_TICK = AutomationCondition.cron_tick_passed(CHECK_CRON)


def _check(destination: str, translator: CdcTranslator) -> AssetChecksDefinition:
    key = translator.changes_key(destination)

    @asset_check(
        asset=key,
        name=LAG_CHECK,
        description=f"Change-log lag of {destination} within its lag_budget_seconds.",
        automation_condition=_EVERY_TICK,
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


def _fresh_checks(
    destination: str, catalog: Catalog, translator: CdcTranslator
) -> AssetChecksDefinition:
    keys = {
        AssetCheckKey(translator.table_key(destination, t.db, t.table), FRESH_CHECK): t
        for t in catalog.tables
    }

    @table_checks(
        name=op_name("cdc_fresh", destination),
        specs=[
            AssetCheckSpec(
                FRESH_CHECK,
                asset=key.asset_key,
                description=f"No change of {table.name} waits in the change log, unapplied to "
                "the mirror, longer than the destination's lag_budget_seconds.",
                automation_condition=_EVERY_TICK,
            )
            for key, table in keys.items()
        ],
        tables=catalog.tables,
    )
    def fresh(
        context: OpExecutionContext, platform: PlatformResource
    ) -> Iterator[AssetCheckResult]:
        configset = platform.load()
        budget = configset.destinations[destination].config.lag_budget_seconds
        selected = [k for k in keys if k in context.selected_asset_check_keys]
        found = mirror_freshness(
            translator.change_log_uri(configset, destination),
            translator.mirror_root(configset, destination),
            [(keys[k].db, keys[k].table) for k in selected],
            configset.lake.storage_options,
        )
        for key, state in zip(selected, found, strict=True):
            behind = state.behind_seconds()
            passed = behind <= budget
            what = (
                "the mirror has every change"
                if not state.pending
                else f"{state.pending} changes unapplied, the oldest for {behind:.0f} s"
            )
            yield AssetCheckResult(
                asset_key=key.asset_key,
                check_name=key.name,
                passed=passed,
                severity=AssetCheckSeverity.ERROR,
                description=f"{what} (budget {budget:.0f} s)",
                metadata={
                    "pending_changes": state.pending,
                    "behind_seconds": round(behind, 1),
                    "mirror_seq": state.mirror_seq,
                    "budget_seconds": budget,
                },
            )

    return fresh


def mirror_freshness_checks(
    configset: ConfigSet,
    catalogs: Mapping[str, Catalog],
    translator: CdcTranslator = DEFAULT_TRANSLATOR,
) -> list[AssetChecksDefinition]:
    """Per valid destination with known tables, the `fresh` check of each table's mirror."""
    return [
        _fresh_checks(name, catalogs[name], translator)
        for name in sorted(configset.destinations)
        if name in catalogs and catalogs[name].tables
    ]
