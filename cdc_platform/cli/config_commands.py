"""`config check` (is the configuration sound, can each source and the lake be reached) and
`import-canal` (a Canal deployment's configuration turned into this one's)."""

from __future__ import annotations

import argparse
from pathlib import Path

from cdc_platform.config import ConfigSet, Destination, load_config
from cdc_platform.config.deployment import deployment_errors, deployment_warnings
from cdc_platform.errors import CdcError

__all__ = ["config_check_command", "import_canal_command"]


def config_check_command(args: argparse.Namespace) -> int:
    from cdc_platform.config.replica_ids import replica_id_conflicts  # noqa: PLC0415 (loaded by this command only: the CLI starts light)

    config = load_config(Path(args.conf))
    names = sorted({*config.destinations, *config.errors})
    if not names:
        print(
            f"ERROR no destinations under {Path(args.conf) / 'destinations'}: add "
            "<name>/instance.yaml there (docs/first-destination.md), or run "
            "`cdc-platform import-canal`"
        )
        return 1
    failed = 0
    conflicts = replica_id_conflicts(config)
    remote = config.lake.is_remote
    for name in names:
        if name not in config.destinations:
            print(f"{name}: ERROR {config.errors[name]}")
            continue
        dest = config.destinations[name]
        details: list[str] = []
        ok = name not in conflicts
        if not ok:
            details.append(f"ERROR {conflicts[name]}")
        # An object store is only asked with --connect: `config check` stays offline.
        drift = _start_drift(config, dest) if args.connect or not remote else None
        if drift is not None:
            details.append(f"warning: {drift}")
        if args.connect:
            line, reached = _connect_check(config, dest)
            details.append(line)
            ok = ok and reached
        state = ("OK" if dest.config.enabled else "OK (disabled)") if ok else "ERROR"
        print(f"{name}: {state}  {dest.path}  sha256:{dest.content_hash[:12]}")
        for detail in details:
            print(f"  {detail}", flush=True)
        failed += not ok
    for warning in deployment_warnings(config):
        print(f"warning: {warning}")
    refused = deployment_errors(config)
    for error in refused:
        print(f"error: {error}")
    if args.connect:
        line, ok = _lake_check(config)
        print(line, flush=True)
        failed += not ok
    return 1 if config.errors or failed or refused else 0


def _start_drift(config: ConfigSet, dest: Destination) -> str | None:
    """Whether ``start:`` differs from the start the destination began with (reported, never
    applied: its checkpoint rules)."""
    from cdc_platform.sink.destination_lake import DestinationLake  # noqa: PLC0415 (keep `config check` light)
    from cdc_platform.sink.start_record import (  # noqa: PLC0415 (keep `config check` light)
        StartRecord,
        start_drift,
    )

    file = DestinationLake.of(config, dest.name).start_record
    try:
        return start_drift(dest.config.start, StartRecord.load(file))
    except CdcError as exc:
        return f"cannot read the start record {file}: {exc}"


def _lake_check(config: ConfigSet) -> tuple[str, bool]:
    """Reach the lake once and prove commits to it are atomic; one line and whether it passed."""
    from cdc_platform.sink.lake_check import check_lake  # noqa: PLC0415 (keep `config check` light)

    lake = config.lake
    try:
        check_lake(lake)
    except CdcError as exc:
        return f"lake: ERROR {exc}", False
    return f"lake {lake.uri}: OK" + (" (atomic commits verified)" if lake.is_remote else ""), True


def _connect_check(config: ConfigSet, dest: Destination) -> tuple[str, bool]:
    """Connect to one destination's source once (no retries: fail fast before a deploy) and
    check its settings and grants; one line for the report and whether it passed."""
    from cdc_platform.sink.destination_lake import DestinationLake  # noqa: PLC0415 (keep `config check` light)
    from cdc_platform.sink.start_record import StartRecord  # noqa: PLC0415 (loaded by this command only: the CLI starts light)
    from cdc_platform.source.factory import open_source  # noqa: PLC0415 (loaded by this command only: the CLI starts light)
    from cdc_platform.source.stream.binlog import SourceInfo  # noqa: PLC0415 (keep `config check` light)

    source, start = dest.config.source, dest.config.start
    where = f"source {source.host}:{source.port} ({source.mode})"
    layout = DestinationLake.of(config, dest.name)
    table_uri, options = layout.change_log, layout.storage_options
    try:
        opened = open_source(source, resume=None, table_uri=table_uri, storage_options=options)
        found = opened.check()
        # A destination that has not begun yet: would its start be found on the server?
        if (
            source.mode == "binlog"
            and start.mode not in ("initial", "latest")
            and StartRecord.load(layout.start_record) is None
        ):
            where += f", start {start.describe()} at {opened.start_position(start)}"
    except CdcError as exc:
        return f"{where}: ERROR {exc}", False
    if isinstance(found, SourceInfo):
        detail = f"{found.version}, server_id {found.server_id}, binlog at {found.position}" + (
            f", gtid {found.gtid_binlog_pos}" if found.gtid_binlog_pos else ""
        )
    else:
        detail = "tables readable"
    return f"{where}: connected, {detail}", True


def import_canal_command(args: argparse.Namespace) -> int:
    from cdc_platform.config.canal_import import import_canal  # noqa: PLC0415 (loaded by this command only: the CLI starts light)

    result = import_canal(Path(args.canal_dir), Path(args.out))
    for warning in result.warnings:
        print(f"WARNING: {warning}")
    for path in result.files:
        print(f"wrote {path}")
    for name, variable in result.password_envs.items():
        print(f"{name}: put the source password in the environment variable {variable}")
    for note in result.notes:
        print(f"note: {note}")
    for source, keys in result.not_imported.items():
        if keys:
            print(f"not imported from {source} (no equivalent here): {', '.join(keys)}")
    for name, error in result.errors.items():
        print(f"{name}: ERROR {error}")
    return 1 if result.errors else 0
