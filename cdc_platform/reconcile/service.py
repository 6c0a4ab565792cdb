"""One reconciliation of a destination: compare every table, then repair where the lease is.

Used by ``cdc-platform reconcile`` and by the Dagster ``cdc_reconcile`` job alike.

1. Compare (read-only, anywhere): each captured base table against its mirror
   (:mod:`.compare`); tables without a primary key as multisets of rows, which are reported
   but cannot be repaired by key.
2. Repair (only under the destination's lease): if a process holds the lease (the normal
   run), the suspected keys go to it through its request inbox
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

from pyspark.sql import SparkSession

from cdc_platform.backfill.repair import RepairResult, RepairTable, repair_keys
from cdc_platform.backfill.request_inbox import repair_inbox
from cdc_platform.backfill.stop import SideWorkStop
from cdc_platform.config.deployment import check_deployment
from cdc_platform.config.loader import ConfigSet
from cdc_platform.coordination.lease import take_lease
from cdc_platform.errors import ReconcileError, SnapshotError
from cdc_platform.ha.lease import Lease
from cdc_platform.reconcile.compare import ChunkProgress, TableComparison, compare_table
from cdc_platform.sink.term import WriteTerm
from cdc_platform.source.mysql import connect_source
from cdc_platform.source.reading.row_reader import base_tables, describe_table
from cdc_platform.source.table_names import split_table_name, table_name_splits
from cdc_platform.spark.locations import mirror_root

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


def reconcile_destination(  # noqa: PLR0912, PLR0913, PLR0915 (the two phases, with their knobs, keyword-only)
    config: ConfigSet,
    destination: str,
    spark: SparkSession,
    *,
    tables: Sequence[str] | None = None,
    chunk_size: int | None = None,
    max_suspects: int | None = None,
    wait_seconds: float | None = None,
    lease_timeout: float = 10.0,
    address: str | None = None,
    on_chunk: Callable[[ChunkProgress], None] | None = None,
) -> ReconcileReport:
    """Compare and repair one destination; see the module docstring.

    Raises:
        ReconcileError: unknown destination or table, or the holder's repair failed.
        SourceError, SparkError, SinkError: reading or writing failed; rerun (it is safe).
    """
    from cdc_platform.coordination.factory import open_lease  # noqa: PLC0415 (kazoo only when used)

    started = time.perf_counter()
    if destination not in config.destinations:
        raise ReconcileError(f"unknown destination {destination!r}")
    dest = config.destinations[destination]
    if dest.config.source.mode != "binlog":
        raise ReconcileError(
            f"{destination}: reconciliation needs the binlog's watermarks; a destination in the "
            "watch-by-id mode lists its tables itself (docs/id_watch.md)"
        )
    settings = config.platform.reconcile
    chunk_size = chunk_size or settings.chunk_size
    max_suspects = max_suspects or settings.max_repairs_per_table
    wait_seconds = settings.wait_seconds if wait_seconds is None else wait_seconds
    source = dest.config.source
    report = ReconcileReport(destination, "clean")
    table_uri = config.table_uri(destination)
    lake = config.lake
    root = mirror_root(lake.uri, destination)
    conn = connect_source(source, purpose="reconciliation")
    try:
        if tables:
            names = []
            for name in tables:
                if not table_name_splits(name):
                    raise ReconcileError(f"--table {name!r}: expected db.table")
                names.append(name)
        else:
            names = base_tables(conn, source.include_tables, source.exclude_tables)
        for name in names:
            db, table = split_table_name(conn, name)
            try:
                spec = describe_table(conn, db, table, require_key=False)
            except SnapshotError as exc:
                report.skipped_tables[name] = str(exc)
                log.warning("%s: not reconciling %s: %s", destination, name, exc)
                continue
            comparison = compare_table(
                spark,
                conn,
                spec,
                change_log_uri=table_uri,
                mirror_root=root,
                storage_options=lake.storage_options,
                chunk_size=chunk_size,
                chunk_bytes=dest.config.snapshot.chunk_bytes,
                max_suspects=max_suspects,
                on_chunk=on_chunk,
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
    lease = open_lease(config.platform, config.conf_dir, destination, address=address)
    lease.start()
    try:
        holder = lease.holder()
        if holder is not None and holder.run_id != lease.run_id:
            inbox = repair_inbox(lake.uri, destination, source, lake.storage_options)
            request_id = inbox.submit(requests, requester=lease.address)
            log.info(
                "%s: %d suspected keys sent to the lease holder %s (epoch %d), request %s",
                destination,
                sum(len(r.keys) for r in requests),
                holder.address,
                holder.epoch,
                request_id,
            )
            result = inbox.wait(request_id, wait_seconds)
            if result is None:
                report.status = "not_repaired"
                report.message = (
                    f"the lease holder {holder.address} (epoch {holder.epoch}) did not take the "
                    f"repair request within {wait_seconds:g} s; nothing was written. Only the "
                    "holder may write the change log: is it a `cdc-platform run` / Dagster run "
                    "(a snapshot in progress does not take requests)?"
                )
            else:
                report.repair, report.repaired_by = result, f"{holder.address} (lease holder)"
        else:
            repair, said = _repair_with_own_lease(
                config, destination, requests, lease, lease_timeout
            )
            if repair is None:
                report.status, report.message = "not_repaired", said
            else:
                report.repair, report.repaired_by = repair, said
    finally:
        lease.close()
    if report.repair is not None and not keyless:
        # Suspects that only lagged (or that the binlog carried meanwhile) need no repair.
        report.status = "repaired" if report.repaired else "clean"
    report.seconds = time.perf_counter() - started
    return report


def _repair_with_own_lease(
    config: ConfigSet,
    destination: str,
    requests: list[RepairTable],
    lease: Lease,
    lease_timeout: float,
) -> tuple[RepairResult | None, str]:
    """Nobody streams the destination: take its lease for the repair, then release it.

    Returns the result (None: the lease could not be taken) and who repaired, or why not.
    Refuses, as `run` and `serve` do, a lake on object storage with a local SQLite lease:
    another machine's process would hold its own lease and write the same change log.
    """
    check_deployment(config)
    term = take_lease(
        lease,
        WriteTerm.in_lake(destination, config.destinations[destination].config, config.lake),
        timeout=lease_timeout,
        doing="a reconciliation repair",
    )
    if term is None:
        return None, (
            f"could not take the free lease of {destination} within {lease_timeout:g} s "
            "(someone took it meanwhile); nothing was written"
        )
    stop = SideWorkStop(destination, term.epoch, work="repair")
    lease.on_lost(lambda error: stop.request_stop(f"lease lost: {error.reason}"))
    try:
        result = repair_keys(
            term,
            requests,
            max_backlog_bytes=config.platform.reconcile.max_repair_backlog_bytes,
            stop=stop,
        )
    finally:
        lease.release()
    return result, f"{lease.address} (this process, epoch {term.epoch})"
