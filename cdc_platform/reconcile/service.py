"""One reconciliation of a destination: compare every table, then repair where the lease is.

Used by ``cdc-platform reconcile`` and by the Dagster ``cdc_reconcile`` job alike.

1. Compare (read-only, anywhere): each captured base table against its mirror
   (:mod:`.compare`); tables without a primary key as multisets of rows, which are reported
   but cannot be repaired by key.
2. Repair (only under the destination's lease, :mod:`.repair_route`): if a process holds
   the lease (the normal run), the suspected keys go to it through its request inbox
   (:mod:`cdc_platform.backfill.request_inbox`) and it writes the
   repair events; if nobody holds it, this process takes the lease, repairs, and releases
   it. If the holder does not take the request in time, nothing is written and the report
   says so (status ``not_repaired``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import pymysql
from pyspark.sql import SparkSession

from cdc_platform.backfill.repair import RepairResult
from cdc_platform.config.loader import ConfigSet
from cdc_platform.config.platform import ReconcileConfig
from cdc_platform.config.source import SourceConfig
from cdc_platform.errors import ReconcileError, SnapshotError
from cdc_platform.reconcile.compare import compare_table
from cdc_platform.reconcile.comparison import ChunkProgress, ComparisonBounds, TableComparison
from cdc_platform.reconcile.repair_route import repair_suspects
from cdc_platform.sink.destination_lake import DestinationLake
from cdc_platform.source.mysql import connect_source
from cdc_platform.source.reading.table_description import describe_table
from cdc_platform.source.reading.table_listing import base_tables
from cdc_platform.source.table_names import split_table_name, table_name_splits

__all__ = ["ReconcileReport", "reconcile_destination"]

log = logging.getLogger(__name__)

Status = Literal["clean", "repaired", "not_repaired", "skipped"]


@dataclass
class ReconcileReport:
    """What one reconciliation found and did."""

    destination: str
    status: Status
    message: str = ""
    tables: list[TableComparison] = field(default_factory=list)
    skipped_tables: dict[str, str] = field(default_factory=dict)
    """Tables not compared, with why (no primary key, ...)."""
    repair: RepairResult | None = None
    repaired_by: str | None = None
    seconds: float = 0.0

    @property
    def differences(self) -> int:
        """Rows the comparison found different over all tables (suspects: some may only have
        lagged behind the source, see :attr:`repaired`)."""
        return sum(t.differences for t in self.tables)

    @property
    def repaired(self) -> int:
        """Repair events written: the differences confirmed against the source and the log."""
        repair = self.repair
        return sum(repair.upserts.values()) + sum(repair.deletes.values()) if repair else 0

    def metadata(self) -> dict[str, Any]:
        """Plain figures for reports and Dagster metadata."""
        repair = self.repair
        return {
            "status": self.status,
            "message": self.message,
            "differences": self.differences,
            "repaired": self.repaired,
            "missing_in_mirror": sum(t.missing_in_mirror for t in self.tables),
            "changed": sum(t.changed for t in self.tables),
            "extra_in_mirror": sum(t.extra_in_mirror for t in self.tables),
            "in_flight": sum(t.in_flight for t in self.tables),
            "source_rows": sum(t.source_rows for t in self.tables),
            "differing_chunks": sum(t.differing_chunks for t in self.tables),
            "chunks": sum(t.chunks for t in self.tables),
            "repair_upserts": sum(repair.upserts.values()) if repair else 0,
            "repair_deletes": sum(repair.deletes.values()) if repair else 0,
            "repair_left_to_binlog": sum(repair.in_flight.values()) if repair else 0,
            "repaired_by": self.repaired_by,
            "seconds": round(self.seconds, 3),
            "tables": [t.summary() for t in self.tables],
            "skipped_tables": self.skipped_tables,
        }


def reconcile_destination(  # noqa: PLR0913 (the destination, Spark; what to compare and how, keyword-only)
    config: ConfigSet,
    destination: str,
    spark: SparkSession,
    *,
    tables: Sequence[str] | None = None,
    settings: ReconcileConfig | None = None,
    address: str | None = None,
    on_chunk: Callable[[ChunkProgress], None] | None = None,
) -> ReconcileReport:
    """Compare and repair one destination; see the module docstring.

    ``tables``: the ``db.table`` names to compare (default: every table it captures);
    ``settings``: the reconcile settings (default: the platform's ``reconcile``);
    ``address``: this process's name in the lease, should it repair under its own.

    Raises:
        ReconcileError: unknown destination or table, or the holder's repair failed.
        SourceError, SparkError, SinkError: reading or writing failed; rerun (it is safe).
    """
    started = time.perf_counter()
    if destination not in config.destinations:
        raise ReconcileError(f"unknown destination {destination!r}")
    dest = config.destinations[destination]
    if dest.config.source.mode != "binlog":
        raise ReconcileError(
            f"{destination}: reconciliation needs the binlog's watermarks; a destination in the "
            "watch-by-id mode lists its tables itself (docs/id_watch.md)"
        )
    settings = settings or config.platform.reconcile
    bounds = ComparisonBounds.of(settings, dest.config.snapshot)
    source = dest.config.source
    report = ReconcileReport(destination, "clean")
    lake = DestinationLake.of(config, destination)
    conn = connect_source(source, purpose="reconciliation")
    try:
        for name in _table_names(conn, tables, source):
            db, table = split_table_name(conn, name)
            try:
                spec = describe_table(conn, db, table, require_key=False)
            except SnapshotError as exc:
                report.skipped_tables[name] = str(exc)
                log.warning("%s: not reconciling %s: %s", destination, name, exc)
                continue
            comparison = compare_table(
                spark, conn, spec, lake=lake, bounds=bounds, on_chunk=on_chunk
            )
            log.info("%s: compared %s: %s", destination, name, comparison.summary())
            report.tables.append(comparison)
    finally:
        conn.close()
    requests = [t.repair_request() for t in report.tables if t.suspects]
    keyless = [t.name for t in report.tables if t.differences and not t.suspects]
    if keyless:
        report.status = "not_repaired"
        report.message = (
            f"rows differ in {', '.join(keyless)}, which have no primary key: they cannot be "
            "repaired by key (see each table's message)"
        )
    if not requests:
        report.seconds = time.perf_counter() - started
        return report
    repair, said = repair_suspects(config, destination, requests, settings, address)
    if repair is None:
        report.status, report.message = "not_repaired", said
    else:
        report.repair, report.repaired_by = repair, said
    if report.repair is not None and not keyless:
        # Suspects that only lagged (or that the binlog carried meanwhile) need no repair.
        report.status = "repaired" if report.repaired else "clean"
    report.seconds = time.perf_counter() - started
    return report


def _table_names(
    conn: pymysql.connections.Connection[Any], tables: Sequence[str] | None, source: SourceConfig
) -> list[str]:
    """The ``db.table`` names asked for (checked for their form), else every base table the
    source's filters capture."""
    if not tables:
        return base_tables(conn, source.include_tables, source.exclude_tables)
    names = []
    for name in tables:
        if not table_name_splits(name):
            raise ReconcileError(f"--table {name!r}: expected db.table")
        names.append(name)
    return names
