"""Operators for the batch units: mirror apply per table, reconciliation, ad-hoc snapshot
request, daily history for ``data_interval_start``.

Each declares its Airflow asset outlets (:mod:`cdc_airflow.assets`, named by the lake's URIs)
when the DAG is parsed, and attaches its figures (row counts, change-log versions and
positions) to the asset event it emits; the same figures are its XCom return value. Every
computation is the engine's, the same calls ``dagster_defs`` makes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from airflow.sdk import Asset, BaseOperator, Context
from airflow.sdk.exceptions import AirflowException

from cdc_airflow.assets import change_log_asset, history_asset, mirror_asset
from cdc_airflow.hooks import CdcHook
from cdc_platform.backfill.request_inbox import snapshot_inbox
from cdc_platform.config import ConfigSet
from cdc_platform.coordination.table_catalog import catalog_table_name
from cdc_platform.errors import SnapshotError
from cdc_platform.reconcile.service import reconcile_destination
from cdc_platform.sink.destination_lake import DestinationLake
from cdc_platform.spark import DestinationMirrors

__all__ = [
    "CdcDailyHistoryOperator",
    "CdcMirrorOperator",
    "CdcReconcileOperator",
    "CdcSnapshotRequestOperator",
    "split_table",
]


def split_table(
    load: Callable[[], ConfigSet], destination: str, table: str, db: str | None = None
) -> tuple[str, str]:
    """``(db, table)`` of an operator's table: ``db`` and ``table`` as given, or ``table``
    as ``db.table`` by the engine's one resolution (a database name may hold a dot: the
    split the destination's catalog has a table for, :func:`catalog_table_name`; ``load``
    reads the configuration, only then)."""
    if db is not None:
        if not db or not table:
            raise ValueError(f"an empty database or table name: {db!r}, {table!r}")
        return db, table
    try:
        return catalog_table_name(load(), destination, table)
    except SnapshotError as exc:
        raise ValueError(str(exc)) from None


def _emit(context: Context, asset: Asset, extra: dict[str, Any]) -> None:
    """Attach ``extra`` to the event this task emits for ``asset``."""
    context["outlet_events"][asset].extra = extra


def _change_log(kwargs: dict[str, Any]) -> Asset:
    """The change-log asset of the operator's destination and connection."""
    hook = CdcHook(kwargs.get("cdc_conn_id", CdcHook.default_conn_name))
    return change_log_asset(hook.load(), kwargs["destination"])


class _CdcOperator(BaseOperator):
    """A task on one destination of the deployment the connection names."""

    def __init__(
        self, *, destination: str, cdc_conn_id: str = CdcHook.default_conn_name, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.destination = destination
        self.cdc_conn_id = cdc_conn_id


class CdcMirrorOperator(_CdcOperator):
    """Apply the change log to the mirror of one table (``table="db.table"``, or ``db=`` and
    ``table=`` its own name: see :func:`split_table`); outlet: the mirror."""

    def __init__(self, *, table: str, db: str | None = None, **kwargs: Any) -> None:
        configset = CdcHook(kwargs.get("cdc_conn_id", CdcHook.default_conn_name)).load()
        db, name = split_table(lambda: configset, kwargs["destination"], table, db)
        mirror = mirror_asset(configset, kwargs["destination"], db, name)
        super().__init__(outlets=[mirror], **kwargs)
        self.db, self.table, self.mirror = db, name, mirror

    def execute(self, context: Context) -> dict[str, Any]:
        """One apply; fails when the change log has nothing of the table yet."""
        hook = CdcHook(self.cdc_conn_id)
        configset = hook.load()
        hook.destination(configset, self.destination)
        with hook.spark_session(configset) as session:
            [applied] = DestinationMirrors.of(configset, self.destination, session).apply(
                [(self.db, self.table)]
            )
        if not applied.has_table:
            raise AirflowException(
                f"no mirror table yet for {self.db}.{self.table}: the change log holds no row "
                "and no definition of it. Its mirror appears with its first change; to copy "
                "its rows now, run a CdcSnapshotRequestOperator for it"
            )
        extra = applied.metadata()
        _emit(context, self.mirror, extra)
        return extra


class CdcReconcileOperator(_CdcOperator):
    """Full-list reconciliation of the destination (or of ``tables``): differences are
    repaired through the change log by the lease holder, so the outlet is the change log
    (``change_log``: that asset as the DAG file declares it elsewhere, with its watcher:
    Airflow keeps one definition of an asset per file, the last it sees). Fails when
    differences were found and could not be repaired."""

    def __init__(
        self,
        *,
        tables: Sequence[str] | None = None,
        change_log: Asset | None = None,
        **kwargs: Any,
    ) -> None:
        change_log = change_log or _change_log(kwargs)
        super().__init__(outlets=[change_log], **kwargs)
        self.change_log = change_log
        self.tables = list(tables) if tables is not None else None

    def execute(self, context: Context) -> dict[str, Any]:
        """Compare and repair; the report's figures are the event's extra."""
        hook = CdcHook(self.cdc_conn_id)
        configset = hook.load()
        with hook.spark_session(configset) as session:
            report = reconcile_destination(configset, self.destination, session, tables=self.tables)
        extra = report.metadata()
        _emit(context, self.change_log, extra)
        if report.status == "not_repaired" and report.differences:
            raise AirflowException(
                f"{self.destination}: {report.differences} differences found, not repaired: "
                f"{report.message}"
            )
        return extra


class CdcSnapshotRequestOperator(_CdcOperator):
    """Ask the destination's running node (the lease holder) for an ad-hoc snapshot of
    ``tables``; waits up to ``wait_seconds`` for its answer (0: submit only). The rows land in
    the change log, its outlet (``change_log`` as for :class:`CdcReconcileOperator`)."""

    template_fields: Sequence[str] = ("tables",)

    def __init__(
        self,
        *,
        tables: Sequence[str],
        wait_seconds: float = 3600.0,
        change_log: Asset | None = None,
        **kwargs: Any,
    ) -> None:
        change_log = change_log or _change_log(kwargs)
        super().__init__(outlets=[change_log], **kwargs)
        self.change_log = change_log
        self.tables = list(tables)
        self.wait_seconds = wait_seconds

    def execute(self, context: Context) -> dict[str, Any]:
        """Submit, then wait for the answer; fails on a refusal or no answer in time."""
        hook = CdcHook(self.cdc_conn_id)
        configset = hook.load()
        destination = hook.destination(configset, self.destination)
        inbox = snapshot_inbox(
            DestinationLake.of(configset, destination.name), destination.config.source
        )
        run_id = context["run_id"]
        request_id = inbox.submit(self.tables, requester=f"airflow:{run_id}")
        self.log.info("snapshot request %s for %s", request_id, ", ".join(self.tables))
        extra: dict[str, Any] = {"request_id": request_id, "tables": self.tables}
        if self.wait_seconds > 0:
            answer = inbox.wait(request_id, self.wait_seconds)
            if answer is None:
                raise AirflowException(
                    f"no answer to snapshot request {request_id} within {self.wait_seconds:g} "
                    f"s: is {destination.name} running (cdc-platform run / serve)?"
                )
            if answer.error:
                raise AirflowException(f"snapshot request {request_id} failed: {answer.error}")
            extra["rows"] = dict(answer.rows)
        _emit(context, self.change_log, extra)
        return extra


class CdcDailyHistoryOperator(_CdcOperator):
    """``db.table`` (named as for :class:`CdcMirrorOperator`) as of the end of the UTC day of
    ``data_interval_start`` (a daily DAG's run, or each day of ``airflow dags backfill``),
    with the day's change figures."""

    def __init__(self, *, table: str, db: str | None = None, **kwargs: Any) -> None:
        hook = CdcHook(kwargs.get("cdc_conn_id", CdcHook.default_conn_name))
        db, name = split_table(hook.load, kwargs["destination"], table, db)
        history = history_asset(kwargs["destination"], db, name)
        super().__init__(outlets=[history], **kwargs)
        self.db, self.table, self.history = db, name, history

    def execute(self, context: Context) -> dict[str, Any]:
        """Build the day's table; its row count and the day's counts are the event's extra."""
        start = context.get("data_interval_start")
        if start is None:
            raise AirflowException("daily history needs a run with a data interval (a schedule)")
        day = start.date()
        hook = CdcHook(self.cdc_conn_id)
        configset = hook.load()
        hook.destination(configset, self.destination)
        with hook.spark_session(configset) as session:
            [done] = DestinationMirrors.of(configset, self.destination, session).history(
                day, [(self.db, self.table)]
            )
        extra: dict[str, Any] = done.metadata()
        _emit(context, self.history, extra)
        return extra
