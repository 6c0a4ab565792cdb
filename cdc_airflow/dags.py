"""The DAGs of one destination, built from its configuration and its table catalog:

* ``cdc_<destination>_mirrors``: one :class:`CdcMirrorOperator` per table, scheduled on the
  change-log asset, whose ``AssetWatcher`` (:class:`ChangeLogCommitTrigger`) turns each new
  commit into an asset event: mirrors run on new changes (Dagster: ``mirror_refresh``);
* ``cdc_<destination>_reconcile``: :class:`CdcReconcileOperator` every random 15-30 minutes
  (``reconcile.interval_minutes``; Dagster: ``reconcile_sensor``);
* ``cdc_<destination>_daily_history``: one :class:`CdcDailyHistoryOperator` per table, daily
  (each run after midnight UTC builds the day that ended) from
  ``dagster.history_start_date``; past days by ``airflow backfill create``.

The catalog is read when the DAG file is parsed (the source's captured tables and the change
log's; a source that is down costs only its tables not yet in the change log).
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from datetime import UTC, datetime

from airflow.sdk import DAG, Asset, AssetWatcher, CronDataIntervalTimetable

from cdc_airflow.assets import change_log_asset
from cdc_airflow.hooks import CdcHook
from cdc_airflow.operators import (
    CdcDailyHistoryOperator,
    CdcMirrorOperator,
    CdcReconcileOperator,
)
from cdc_airflow.timetables import RandomIntervalTimetable
from cdc_airflow.triggers import ChangeLogCommitTrigger
from cdc_platform.config import ConfigSet
from cdc_platform.coordination.table_catalog import discover_tables

__all__ = ["destination_dags", "task_id", "watched_change_log"]

TAGS = ["cdc-platform"]


MAX_TASK_ID = 250
"""Airflow's longest task id."""
_PLAIN_DB = re.compile(r"[A-Za-z0-9-]+")
_PLAIN_TABLE = re.compile(r"[A-Za-z0-9_-]+")
_NOT_ID = re.compile(r"[^A-Za-z0-9_-]")


def task_id(prefix: str, db: str, table: str) -> str:
    """A valid task id for a table, never another table's (Airflow allows letters, digits,
    ``-``, ``_``, ``.``; at most 250, no ``..``).

    ``<prefix>_<db>_<table>`` when that names one table only: ASCII letters, digits and
    ``-``, no ``_`` in the database (the first ``_`` after the prefix ends it). Any other
    name (``app_user.log`` beside ``app.user_log``, a dot, an accent) is made readable as in
    ``dagster_defs/names.py`` and ends with ``.`` and a hash of the exact names: a plain id
    has no ``.``, so the two kinds never meet.
    """
    plain = f"{prefix}_{db}_{table}"
    if _PLAIN_DB.fullmatch(db) and _PLAIN_TABLE.fullmatch(table) and len(plain) <= MAX_TASK_ID:
        return plain
    folded = [
        _NOT_ID.sub("_", unicodedata.normalize("NFKD", p).encode("ascii", "ignore").decode())
        for p in (db, table)
    ]
    exact = "\x00".join((db, table)).encode("utf-8", "surrogatepass")
    digest = hashlib.blake2b(exact, digest_size=6).hexdigest()
    readable = f"{prefix}_{folded[0]}_{folded[1]}"[: MAX_TASK_ID - len(digest) - 1]
    return f"{readable}.{digest}"


def watched_change_log(
    configset: ConfigSet, destination: str, *, poll_seconds: float = 5.0
) -> Asset:
    """The change-log asset with a watcher that emits an event per new commit."""
    asset = change_log_asset(configset, destination)
    trigger = ChangeLogCommitTrigger.of(configset, destination, poll_seconds=poll_seconds)
    return Asset(
        name=asset.name,
        uri=asset.uri,
        group=asset.group,
        watchers=[AssetWatcher(name=f"cdc_{destination}_commits", trigger=trigger)],
    )


def destination_dags(
    destination: str, *, cdc_conn_id: str = CdcHook.default_conn_name
) -> list[DAG]:
    """The three DAGs of ``destination`` (see the module docstring)."""
    configset = CdcHook(cdc_conn_id).load()
    tables = [(t.db, t.table) for t in discover_tables(configset, destination).tables]
    start = datetime.fromisoformat(configset.platform.dagster.history_start_date).replace(
        tzinfo=UTC
    )
    common = {"destination": destination, "cdc_conn_id": cdc_conn_id}

    change_log = watched_change_log(configset, destination)
    with DAG(
        f"cdc_{destination}_mirrors",
        schedule=[change_log],
        start_date=start,
        catchup=False,
        max_active_runs=1,
        tags=TAGS,
        doc_md=f"Mirrors of {destination}, applied on each new change-log commit.",
    ) as mirrors:
        for db, table in tables:
            CdcMirrorOperator(task_id=task_id("mirror", db, table), db=db, table=table, **common)

    settings = configset.platform.reconcile
    with DAG(
        f"cdc_{destination}_reconcile",
        schedule=RandomIntervalTimetable(
            *settings.interval_minutes, key=f"cdc_{destination}_reconcile"
        ),
        start_date=start,
        catchup=False,
        max_active_runs=1,
        is_paused_upon_creation=not settings.enabled,
        tags=TAGS,
        doc_md=f"Full-list reconciliation of {destination} against its mirrors.",
    ) as reconcile:
        CdcReconcileOperator(task_id="reconcile", change_log=change_log, **common)

    with DAG(
        f"cdc_{destination}_daily_history",
        # Data intervals: the run after midnight covers the day that just ended.
        schedule=CronDataIntervalTimetable("@daily", timezone="UTC"),
        start_date=start,
        catchup=False,
        tags=TAGS,
        doc_md=f"Each table of {destination} as of the end of each UTC day; past days by "
        f"`airflow backfill create --dag-id cdc_{destination}_daily_history "
        "--from-date ... --to-date ...`.",
    ) as history:
        for db, table in tables:
            CdcDailyHistoryOperator(
                task_id=task_id("history", db, table), db=db, table=table, **common
            )

    return [mirrors, reconcile, history]
