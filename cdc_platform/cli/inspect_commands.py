"""Commands an operator asks a destination with: `status`, `tables`, `checkpoint show`, and
`release` (its lease handed to a standby)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from cdc_platform.cli.arguments import destination_of
from cdc_platform.config import load_config

__all__ = ["checkpoint_show_command", "release_command", "status_command", "tables_command"]


def status_command(args: argparse.Namespace) -> int:
    from cdc_platform.coordination.status import collect_status, format_status  # noqa: PLC0415 (loaded by this command only: the CLI starts light)

    # `status` never connects to a source: it needs no source password.
    config = load_config(Path(args.conf), check_secrets=False)
    names = sorted({*config.destinations, *config.errors})
    if args.destination:
        destination_of(args, check_secrets=False)
        names = [args.destination]
    statuses = collect_status(config, names)
    if args.json:
        print(json.dumps([s.to_dict() for s in statuses], indent=2, sort_keys=True))
    else:
        if not statuses:
            print(f"no destinations under {Path(args.conf) / 'destinations'}")
        for status in statuses:
            print(format_status(status))
    return 1 if any(s.errors for s in statuses) else 0


def tables_command(args: argparse.Namespace) -> int:
    """The source tables one destination captures and the ones its filters skip, and why."""
    from cdc_platform.source.reading.table_listing import list_tables  # noqa: PLC0415 (light CLI)

    _config, dest = destination_of(args)
    source = dest.config.source
    if source.mode == "id_watch" and source.id_watch is not None:
        watched = ", ".join(t.table for t in source.id_watch.tables)
        print(f"{dest.name}: id_watch mode captures exactly its watched tables: {watched}")
        return 0
    listing = list_tables(source)
    if args.json:
        print(json.dumps([t.to_dict() for t in listing.tables], indent=2, sort_keys=True))
        return 0 if listing.captured else 1
    print(
        f"{dest.name}: {len(listing.captured)} captured, {len(listing.skipped)} skipped "
        f"on {source.host}:{source.port} (system schemas: {listing.system_tables} tables, "
        "never captured)"
    )
    width = max((len(t.name) for t in listing.tables), default=0)
    for table in listing.tables:
        notes = [table.reason]
        if table.captured and not table.has_primary_key:
            notes.append("no primary key: its mirror is a multiset (docs/spark.md)")
        if table.captured and table.rows_estimate is not None:
            notes.append(f"~{table.rows_estimate} rows")
        state = "captured" if table.captured else "skipped "
        print(f"  {state}  {table.name:<{width}}  {'; '.join(notes)}")
    if not listing.captured:
        print(f"WARNING: {dest.name}'s include_tables / exclude_tables capture no table")
        return 1
    return 0


def release_command(args: argparse.Namespace) -> int:
    from cdc_platform.coordination.factory import open_lease  # noqa: PLC0415 (loaded by this command only: the CLI starts light)

    config, destination = destination_of(args)
    lease = open_lease(config.platform, config.conf_dir, destination.name)
    try:
        holder = lease.request_release()
    finally:
        lease.close()
    if holder is None:
        print(f"{destination.name}: nobody holds the lease; nothing to release")
        return 1
    print(
        f"{destination.name}: asked {holder.address} (epoch {holder.epoch}) to release the lease; "
        "a standby takes over"
    )
    return 0


def checkpoint_show_command(args: argparse.Namespace) -> int:
    from cdc_platform.sink.destination_lake import DestinationLake  # noqa: PLC0415 (keep `config check` light)

    config, destination = destination_of(args)
    lake = DestinationLake.of(config, destination.name)
    sink = lake.open_change_log()
    try:
        checkpoint = sink.recover()
    finally:
        sink.close()
    if checkpoint is None:
        print(f"{destination.name}: no checkpoint yet ({lake.change_log})")
        return 0
    print(
        f"{destination.name}: batch {checkpoint.batch_seq}, epoch {checkpoint.epoch}, "
        f"last seq {checkpoint.last_seq}, table version {checkpoint.version}\n"
        f"  resume at {checkpoint.resume}"
    )
    return 0
