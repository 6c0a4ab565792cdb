"""What `cdc-platform status` shows: per destination, from the authoritative place for each fact.

* holder, epoch, standbys: the lease store (ZooKeeper running and cluster nodes, or the
  ``master_lock`` row and the node registry);
* committed position and the epoch that wrote it: the change log's checkpoint;
* lag, rows/s, buffer fill, the last commit and the holder's metrics endpoint: the
  holder's ``status/<destination>`` entry in the state watch (published on commits and
  every lease renewal, at most once per publish interval; either lease backend);
* the start the destination began with and whether ``start:`` was edited since (the start
  record in the lake), and a snapshot's progress per table (its state file in the lake).

Each source may fail on its own (ZooKeeper down, table not created yet): the error is reported
next to whatever else could be read.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from cdc_platform.config.loader import ConfigSet
from cdc_platform.coordination.factory import open_lease, open_registry, open_state_store
from cdc_platform.errors import CdcError
from cdc_platform.ha.members import HolderInfo, MemberInfo
from cdc_platform.ha.registry import NodeRegistry
from cdc_platform.sink.destination_lake import DestinationLake
from cdc_platform.sink.snapshot_progress import TableProgress, read_snapshot_progress
from cdc_platform.sink.start_record import StartRecord, start_drift
from cdc_platform.watch.keys import status_key

__all__ = ["DestinationStatus", "collect_status", "format_status"]


@dataclass
class DestinationStatus:
    """Everything `status` knows about one destination."""

    destination: str
    backend: str
    holder: HolderInfo | None = None
    members: list[MemberInfo] = field(default_factory=list)
    batch_seq: int | None = None
    table_epoch: int | None = None
    position: str | None = None
    lag_seconds: float | None = None
    committed_at: float | None = None
    status_epoch: int | None = None
    start: str | None = None
    """The start the destination began with (``start:`` when it had no checkpoint)."""
    start_changed: str | None = None
    """Set when ``start:`` was edited since: it is not applied (the checkpoint rules)."""
    snapshot: list[TableProgress] = field(default_factory=list)
    """A snapshot in progress, per table ([] when none runs)."""
    rows_per_second: float | None = None
    buffer_fill: float | None = None
    metrics_url: str | None = None
    published_at: float | None = None
    """When the holder published these figures (its clock)."""
    errors: list[str] = field(default_factory=list)
    stale: str = ""
    """Why lag, rates and the metrics URL are from a run that is gone ("" when current)."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        data = asdict(self)
        data["snapshot"] = [table.to_dict() for table in self.snapshot]
        return data


def collect_status(config: ConfigSet, names: list[str]) -> list[DestinationStatus]:
    """Read the lease store, the change logs and the state watch for ``names``."""
    platform = config.platform
    registry = open_registry(platform, config.conf_dir)
    store = open_state_store(platform, config.conf_dir)
    result: list[DestinationStatus] = []
    try:
        for name in names:
            status = DestinationStatus(name, platform.lease.backend)
            if name in config.errors:
                status.errors.append(f"config: {config.errors[name]}")
            _lease_state(config, name, registry, status)
            if name in config.errors:  # where its change log is depends on its config
                result.append(status)
                continue
            sink = DestinationLake.of(config, name).open_change_log()
            try:
                checkpoint = sink.recover()
                if checkpoint is not None:
                    status.batch_seq = checkpoint.batch_seq
                    status.table_epoch = checkpoint.epoch
                    status.position = str(checkpoint.resume)
            except CdcError as exc:
                status.errors.append(f"change log: {exc}")
            finally:
                sink.close()
            _lake_state(config, name, status)
            try:
                entry = store.get(status_key(name))
                if entry is not None:
                    data = json.loads(entry.value)
                    status.lag_seconds = data.get("lag_seconds")
                    status.committed_at = data.get("committed_at")
                    status.status_epoch = data.get("epoch")
                    status.rows_per_second = data.get("rows_per_second")
                    status.buffer_fill = data.get("buffer_fill")
                    status.metrics_url = data.get("metrics_url")
                    status.published_at = data.get("published_at")
            except (CdcError, ValueError) as exc:
                status.errors.append(f"state watch: {exc}")
            status.stale = _stale(status, time.time())
            result.append(status)
    finally:
        store.close()
        if registry is not None:
            registry.db.close()
    return result


def _lease_state(
    config: ConfigSet, name: str, registry: NodeRegistry | None, status: DestinationStatus
) -> None:
    """The holder and the members, from the lease store."""
    lease = open_lease(config.platform, config.conf_dir, name, registry=registry)
    try:
        status.holder = lease.holder()
        status.members = lease.members()
    except CdcError as exc:
        status.errors.append(f"lease: {exc}")
    finally:
        lease.close()


def _lake_state(config: ConfigSet, name: str, status: DestinationStatus) -> None:
    """The start record and a snapshot's progress, both in the destination's lake folder."""
    layout = DestinationLake.of(config, name)
    try:
        record = StartRecord.load(layout.start_record)
        if record is not None:
            status.start = record.start.describe() + (
                f" at {record.position}" if record.position else ""
            )
            destination = config.destinations.get(name)
            if destination is not None:
                status.start_changed = start_drift(destination.config.start, record)
        status.snapshot = read_snapshot_progress(layout.snapshot_state)
    except CdcError as exc:
        status.errors.append(f"lake: {exc}")


def format_status(status: DestinationStatus, now: float | None = None) -> str:
    """Human-readable lines for one destination."""
    now = time.time() if now is None else now
    holder = status.holder
    if holder is None:
        head = f"{status.destination}: no holder ({status.backend} lease)"
    else:
        state = "" if holder.active else ", release requested"
        head = (
            f"{status.destination}: holder {holder.address} epoch {holder.epoch} "
            f"({status.backend} lease{state})"
        )
    standbys = [m.address for m in status.members if holder is None or m.run_id != holder.run_id]
    lines = [head, f"  standby: {', '.join(standbys) if standbys else '-'}"]
    if status.batch_seq is None:
        lines.append("  change log: no checkpoint yet")
    else:
        lines.append(
            f"  change log: batch {status.batch_seq}, epoch {status.table_epoch}, "
            f"position {status.position}"
        )
    lines.extend(_figure_lines(status, now))
    lines.extend(f"  error: {error}" for error in status.errors)
    return "\n".join(lines)


STALE_AFTER_SECONDS = 60.0
"""A holder publishes its figures on every lease renewal: older ones are from a run that
stopped (or cannot reach the state watch)."""


def _stale(status: DestinationStatus, now: float) -> str:
    """Why the published figures no longer describe a running pipeline ("" if they do)."""
    if status.holder is None:
        return "stale: no run holds the lease"
    if status.published_at is not None and now - status.published_at > STALE_AFTER_SECONDS:
        return f"stale: not republished for {now - status.published_at:.0f} s"
    return ""


def _figure_lines(status: DestinationStatus, now: float) -> list[str]:
    """Lag, last commit, rate, start and snapshot lines (the holder's and the lake's figures)."""
    lines: list[str] = []
    stale = _stale(status, now)
    if status.lag_seconds is not None:
        if status.published_at is not None:
            when = f"reported {now - status.published_at:.0f} s ago"
        else:
            when = "at the last commit"
        if stale:
            when = f"{stale}; {when}"
        lines.append(f"  lag: {status.lag_seconds:.1f} s ({when})")
    else:
        lines.append("  lag: -")
    if status.committed_at is not None:
        lines.append(f"  last commit: {now - status.committed_at:.0f} s ago")
    if status.rows_per_second is not None or status.buffer_fill is not None:
        rate = "-" if status.rows_per_second is None else f"{status.rows_per_second:.0f}"
        fill = "-" if status.buffer_fill is None else f"{100 * status.buffer_fill:.0f} %"
        lines.append(f"  rows/s: {rate}, buffer fill: {fill}")
    if status.start is not None:
        lines.append(f"  start: {status.start}")
    if status.start_changed is not None:
        lines.append(f"  warning: {status.start_changed}")
    for table in status.snapshot:
        lines.append(
            f"  snapshot {table.table}: {table.state}, {table.rows_read}/"
            f"~{table.estimated_rows} rows ({table.percent:.0f}%), {table.chunks} chunks"
        )
    if status.metrics_url is not None:
        lines.append(f"  metrics: {status.metrics_url}" + (f" ({stale})" if stale else ""))
    return lines
