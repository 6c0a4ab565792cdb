"""The handlers of the `cdc-platform` subcommands: each takes the parsed arguments and
returns the exit code."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from cdc_platform.config import ConfigSet, Destination, load_config
from cdc_platform.config.deployment import (
    check_deployment,
    deployment_errors,
    deployment_warnings,
)
from cdc_platform.errors import CdcError, ConfigError
from cdc_platform.infra.signals import stop_signals

if TYPE_CHECKING:
    from cdc_platform.runtime.prometheus import PrometheusMetrics

__all__ = [
    "checkpoint_show_command",
    "config_check_command",
    "demo_command",
    "import_canal_command",
    "reconcile_command",
    "release_command",
    "run_command",
    "serve_command",
    "snapshot_command",
    "status_command",
    "tables_command",
]

Handler = Callable[[argparse.Namespace], int]


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

    file = DestinationLake.of(config.lake, dest.name, dest.config).start_record
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
    layout = DestinationLake.of(config.lake, dest.name, dest.config)
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


def _destination(
    args: argparse.Namespace, *, check_secrets: bool = True
) -> tuple[ConfigSet, Destination]:
    config = load_config(Path(args.conf), check_secrets=check_secrets)
    if args.destination in config.errors:
        raise config.errors[args.destination]
    if args.destination not in config.destinations:
        known = ", ".join(sorted(config.destinations)) or "none"
        raise ConfigError(
            f"no destination {args.destination!r} under {Path(args.conf) / 'destinations'} "
            f"(known: {known})"
        )
    return config, config.destinations[args.destination]


def _metrics(args: argparse.Namespace, config: ConfigSet) -> PrometheusMetrics | None:
    """The process's Prometheus endpoint if ``--metrics-port`` or ``metrics.port`` asks for
    one; its address is printed (and published for `status`). Without one, prometheus_client
    is never imported (about 12 MB of resident memory with what it imports)."""
    if args.metrics_port is None and config.platform.metrics.port is None:
        return None
    from cdc_platform.runtime.prometheus import open_metrics  # noqa: PLC0415 (light CLI)

    metrics = open_metrics(config.platform.metrics, port=args.metrics_port, host=args.metrics_host)
    if metrics is not None:
        print(f"metrics: {metrics.url}", flush=True)
    return metrics


def run_command(args: argparse.Namespace) -> int:
    from cdc_platform.runtime.supervised import supervised_destination  # noqa: PLC0415 (loaded by this command only: the CLI starts light)

    config, destination = _destination(args)
    metrics = _metrics(args, config)
    with (
        supervised_destination(
            config,
            destination,
            address=args.address,
            metrics_interval_seconds=args.metrics_interval,
            metrics=metrics,
        ) as supervisor,
        stop_signals(supervisor.request_stop),
    ):
        summary = supervisor.run(exit_when_idle_seconds=args.exit_when_idle)
    print(
        f"{summary.destination}: {summary.reason}; {summary.batches} batches, {summary.rows} rows "
        f"this run; last batch {summary.last_batch_seq} at {summary.resume}"
    )
    if summary.error is not None:
        print(f"error: {summary.error}", file=sys.stderr)
        return 1
    return 0


def serve_command(args: argparse.Namespace) -> int:
    from cdc_platform.ha.members import default_address  # noqa: PLC0415 (light CLI)
    from cdc_platform.runtime.serve import ServeProcess  # noqa: PLC0415 (loaded by this command only: the CLI starts light)

    conf = Path(args.conf)
    config = load_config(conf)
    check_deployment(config)
    platform = config.platform
    # One identity for every destination this process holds: `status` shows it as the holder.
    address = args.address or platform.lease.address or f"serve@{default_address()}"
    server = ServeProcess(
        conf,
        address=address,
        metrics_interval_seconds=args.metrics_interval,
        metrics=_metrics(args, config),
    )

    with stop_signals(server.request_stop, on_hup=server.rescan):
        left = server.run()
    if left:
        print(f"error: not stopped in time: {', '.join(left)}", file=sys.stderr)
        return 1
    print(f"{address}: every destination stopped")
    return 0


def status_command(args: argparse.Namespace) -> int:
    from cdc_platform.coordination.status import collect_status, format_status  # noqa: PLC0415 (loaded by this command only: the CLI starts light)

    # `status` never connects to a source: it needs no source password.
    config = load_config(Path(args.conf), check_secrets=False)
    names = sorted({*config.destinations, *config.errors})
    if args.destination:
        _destination(args, check_secrets=False)
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

    _config, dest = _destination(args)
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

    config, destination = _destination(args)
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
    from cdc_platform.sink import DeltaChangeLog  # noqa: PLC0415 (keep `config check` light)

    config, destination = _destination(args)
    sink = DeltaChangeLog(
        config.table_uri(destination.name),
        destination.name,
        storage_options=config.lake.delta_options(),
    )
    try:
        checkpoint = sink.recover()
    finally:
        sink.close()
    if checkpoint is None:
        print(f"{destination.name}: no checkpoint yet ({config.table_uri(destination.name)})")
        return 0
    print(
        f"{destination.name}: batch {checkpoint.batch_seq}, epoch {checkpoint.epoch}, "
        f"last seq {checkpoint.last_seq}, table version {checkpoint.version}\n"
        f"  resume at {checkpoint.resume}"
    )
    return 0


def _snapshot_request(args: argparse.Namespace) -> int:
    """`snapshot --request`: a request in the lake, served by the running node."""
    from cdc_platform.backfill.request_inbox import snapshot_inbox  # noqa: PLC0415 (loaded by this command only: the CLI starts light)

    config, destination = _destination(args)
    if not args.table:
        raise ConfigError("snapshot --request needs the tables: --table db.table ...")
    inbox = snapshot_inbox(
        config.lake.uri, destination.name, destination.config.source, config.lake.storage_options
    )
    request_id = inbox.submit(args.table, requester="cli")
    print(f"{destination.name}: snapshot request {request_id} for {', '.join(args.table)}")
    if args.wait <= 0:
        return 0
    answer = inbox.wait(request_id, args.wait)
    if answer is None:
        print(f"{destination.name}: no answer within {args.wait:g} s; the request waits")
        return 4
    if answer.error:
        print(f"{destination.name}: snapshot request {request_id} failed: {answer.error}")
        return 1
    rows = answer.rows
    print(
        f"{destination.name}: snapshot request {request_id} done: "
        + ", ".join(f"{table} {count} rows" for table, count in sorted(rows.items()))
    )
    return 0


def snapshot_command(args: argparse.Namespace) -> int:
    if args.request:
        return _snapshot_request(args)
    # Imported here to keep `config check` light.
    from cdc_platform.backfill.snapshot import (  # noqa: PLC0415 (loaded by this command only: the CLI starts light)
        SnapshotProgress,
        SnapshotRunner,
    )
    from cdc_platform.backfill.stop import SideWorkStop  # noqa: PLC0415 (loaded by this command only: the CLI starts light)
    from cdc_platform.coordination.factory import open_lease  # noqa: PLC0415 (loaded by this command only: the CLI starts light)
    from cdc_platform.coordination.lease import take_lease  # noqa: PLC0415 (loaded by this command only: the CLI starts light)
    from cdc_platform.errors import SnapshotError  # noqa: PLC0415 (loaded by this command only: the CLI starts light)
    from cdc_platform.sink.term import WriteTerm  # noqa: PLC0415 (loaded by this command only: the CLI starts light)

    config, destination = _destination(args)
    check_deployment(config)
    name = destination.name
    lease = open_lease(config.platform, config.conf_dir, name)
    lease.start()
    try:
        term = take_lease(
            lease,
            WriteTerm.in_lake(name, destination.config, config.lake),
            timeout=args.lease_timeout,
            doing="the snapshot; rerun to resume",
        )
        if term is None:
            raise SnapshotError(
                f"{name}: could not take the destination's lease within {args.lease_timeout} s; "
                "stop its normal run (`cdc-platform release` or stop the process) and retry"
            )
        stop = SideWorkStop(name, term.epoch, work="snapshot")
        lease.on_lost(lambda error: stop.request_stop(f"lease lost: {error.reason}"))
        settings = destination.config.snapshot

        tty = sys.stderr.isatty()

        def progress(p: SnapshotProgress) -> None:
            total = max(p.estimated_rows, p.rows_read, 1)
            done = p.rows_read / total
            rate = p.rows_written / p.seconds if p.seconds > 0 else 0.0
            bar = "#" * int(24 * done) + "." * (24 - int(24 * done))
            print(
                f"{chr(13) if tty else ''}snapshot {p.table} [{p.table_index + 1}/{p.tables}] "
                f"[{bar}] {p.rows_read}/{total} rows ({100 * done:.0f}%), "
                f"chunk {p.chunks} ({p.chunk_rows} rows), {p.rows_dropped} merged from the binlog, "
                f"batch {p.batch_seq}, {rate:.0f} rows/s",
                end="" if tty else "\n",
                file=sys.stderr,
                flush=True,
            )

        runner = SnapshotRunner(
            term,
            term.layout.snapshot_state,
            tables=args.table or None,
            chunk_size=args.chunk_size or settings.chunk_size,
            chunk_seconds=args.chunk_seconds or settings.chunk_seconds,
            on_progress=progress,
            stop=stop,
        )

        with stop_signals(lambda _reason: runner.request_stop()):
            result = runner.run()
        if tty:
            print(file=sys.stderr)
    finally:
        lease.close()
    state = "resumed and finished" if result.resumed else "finished"
    print(
        f"{name}: snapshot {state}: {result.rows_written} rows in {result.chunks} chunks "
        f"({result.rows_dropped} rows merged from the binlog, {result.streamed_events} binlog "
        f"events) in {result.seconds:.1f} s; change log at batch {result.last_batch_seq}, "
        f"resume at {result.resume}"
    )
    return 0


def reconcile_command(args: argparse.Namespace) -> int:
    from cdc_platform.reconcile.comparison import ChunkProgress  # noqa: PLC0415 (Spark is heavy)
    from cdc_platform.reconcile.service import reconcile_destination  # noqa: PLC0415 (loaded by this command only: the CLI starts light)
    from cdc_platform.spark.session import SparkSessionFactory  # noqa: PLC0415 (loaded by this command only: the CLI starts light)

    config, destination = _destination(args)

    def progress(p: ChunkProgress) -> None:
        rate = p.rows / p.seconds if p.seconds > 0 else 0.0
        print(
            f"reconcile {p.table}: read {p.rows} source rows in {p.chunks} chunks, "
            f"{rate:.0f} rows/s",
            file=sys.stderr,
            flush=True,
        )

    given = {"chunk_size": args.chunk_size or None, "wait_seconds": args.wait}  # None: as set
    given = {key: value for key, value in given.items() if value is not None}
    factory = SparkSessionFactory(config.platform.spark, config.lake)
    try:
        report = reconcile_destination(
            config,
            destination.name,
            factory.session(),
            tables=args.table or None,
            settings=config.platform.reconcile.model_copy(update=given),
            on_chunk=progress if not args.json else None,
        )
    finally:
        factory.stop()
    if args.json:
        print(json.dumps({"destination": destination.name, **report.metadata()}, indent=2))
    else:
        for table in report.tables:
            line = (
                f"{table.name}: {table.status}, {table.source_rows} source rows, "
                f"{table.mirror_rows} mirror rows, {table.differing_chunks}/{table.chunks} "
                f"chunks differ: {table.missing_in_mirror} missing in the mirror, "
                f"{table.changed} changed, {table.extra_in_mirror} only in the mirror "
                f"({table.in_flight} keys in flight, {table.seconds:.1f} s)"
            )
            print(line + (f"; {table.message}" if table.message else ""))
        for name, why in report.skipped_tables.items():
            print(f"{name}: skipped: {why}")
        repair = report.repair
        if repair is not None:
            print(
                f"{destination.name}: repaired by {report.repaired_by}: "
                f"{sum(repair.upserts.values())} upserts, {sum(repair.deletes.values())} "
                f"deletes, {sum(repair.in_flight.values())} left to the binlog, "
                f"batches {repair.batches}"
            )
        print(
            f"{destination.name}: {report.status}"
            + (f": {report.message}" if report.message else "")
            + f" ({report.seconds:.1f} s)"
        )
    return 3 if report.status == "not_repaired" else 0


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


def demo_command(args: argparse.Namespace) -> int:
    from cdc_platform.demo import run_demo  # noqa: PLC0415 (only the demo needs the test servers)

    return run_demo(
        Path(args.conf),
        rate=args.rate,
        with_dagster=not args.no_dagster,
        port=args.port,
        spark_mode=args.spark,
    )
