"""A mirror materialization carries the latest reconciliation verdict.

Dagster counts a check only when its newest evaluation targets the asset's newest
materialization; otherwise the UI reads "Not evaluated". A mirror is materialized every few
seconds to minutes, a reconciliation runs every 15-30 minutes, so the ``reconciled`` check
read "Not evaluated" nearly all the time although it ran and passed. Each mirror
materialization therefore re-emits, in its own run, the newest verdict of the check, with
when and in which run it was reached (``reconciled_at``, ``reconciled_in_run``): green when
the last reconciliation passed, red (its severity) when it failed, until the next one.
"""

from __future__ import annotations

from dagster import (
    AssetCheckEvaluation,
    AssetCheckKey,
    AssetExecutionContext,
    AssetKey,
    DagsterInstance,
    MetadataValue,
)

__all__ = ["CARRIED_FROM_RUN", "RECONCILED", "carried_evaluation", "carry", "carry_reconciled"]

RECONCILED = "reconciled"
"""Name of the reconciliation check on each mirror (``dagster_defs.reconcile``)."""

CARRIED_FROM_RUN = "reconciled_in_run"
"""Metadata of a carried verdict: the run that reached it."""
CARRIED_AT = "reconciled_at"
"""Metadata of a carried verdict: when it was reached."""


def carry(evaluation: AssetCheckEvaluation, run_id: str, timestamp: float) -> AssetCheckEvaluation:
    """``evaluation`` (reached in ``run_id`` at ``timestamp``) as a verdict to re-emit; a
    verdict that was itself carried keeps its origin."""
    metadata = dict(evaluation.metadata)
    if CARRIED_FROM_RUN not in metadata:
        metadata[CARRIED_FROM_RUN] = MetadataValue.text(run_id or "-")
        metadata[CARRIED_AT] = MetadataValue.timestamp(timestamp)
    return AssetCheckEvaluation(
        asset_key=evaluation.asset_key,
        check_name=evaluation.check_name,
        passed=evaluation.passed,
        severity=evaluation.severity,
        description=evaluation.description,
        metadata=metadata,
    )


def carried_evaluation(
    instance: DagsterInstance, key: AssetCheckKey
) -> AssetCheckEvaluation | None:
    """The newest completed evaluation of ``key`` as a verdict to re-emit (None: never
    evaluated, or its newest execution did not finish)."""
    records = instance.event_log_storage.get_latest_asset_check_execution_by_key([key])
    record = records.get(key)
    entry = record.event if record is not None else None
    event = entry.dagster_event if entry is not None else None
    data = event.event_specific_data if event is not None else None
    if entry is None or not isinstance(data, AssetCheckEvaluation):
        return None
    return carry(data, entry.run_id, entry.timestamp)


def carry_reconciled(context: AssetExecutionContext, mirror: AssetKey) -> None:
    """Re-emit the mirror's newest reconciliation verdict in this run, unless the run
    executes the check itself (its own result then counts)."""
    key = AssetCheckKey(mirror, RECONCILED)
    selection = context.run.asset_check_selection
    if selection is not None and key in selection:
        return
    evaluation = carried_evaluation(context.instance, key)
    if evaluation is not None:
        context.log_event(evaluation)
