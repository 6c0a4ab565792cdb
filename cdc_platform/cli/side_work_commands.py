r"""The side work an operator starts by hand: `snapshot` (run here under the destination's
lease, or ``--request``\ed from the node that streams it) and `reconcile`."""

from __future__ import annotations

import argparse
import json
import sys

from cdc_platform.cli.arguments import destination_of
from cdc_platform.config.deployment import check_deployment
from cdc_platform.errors import ConfigError
from cdc_platform.infra.signals import stop_signals

__all__ = ["reconcile_command", "snapshot_command"]


def _snapshot_request(args: argparse.Namespace) -> int:
    """`snapshot --request`: a request in the lake, served by the running node."""
    from cdc_platform.backfill.request_inbox import snapshot_inbox  # noqa: PLC0415 (loaded by this command only: the CLI starts light)
    from cdc_platform.sink.destination_lake import DestinationLake  # noqa: PLC0415 (keep `config check` light)

    config, destination = destination_of(args)
    if not args.table:
        raise ConfigError("snapshot --request needs the tables: --table db.table ...")
    inbox = snapshot_inbox(DestinationLake.of(config, destination.name), destination.config.source)
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
    from cdc_platform.backfill.progress import SnapshotObservers  # noqa: PLC0415 (loaded by this command only: the CLI starts light)
    from cdc_platform.backfill.snapshot import (  # noqa: PLC0415 (loaded by this command only: the CLI starts light)
        SnapshotProgress,
        SnapshotRunner,
    )
    from cdc_platform.backfill.stop import SideWorkStop  # noqa: PLC0415 (loaded by this command only: the CLI starts light)
    from cdc_platform.coordination.factory import open_lease  # noqa: PLC0415 (loaded by this command only: the CLI starts light)
    from cdc_platform.coordination.lease import take_lease  # noqa: PLC0415 (loaded by this command only: the CLI starts light)
    from cdc_platform.errors import SnapshotError  # noqa: PLC0415 (loaded by this command only: the CLI starts light)
    from cdc_platform.sink.term import WriteTerm  # noqa: PLC0415 (loaded by this command only: the CLI starts light)

    config, destination = destination_of(args)
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
            settings=settings.model_copy(
                update={
                    "chunk_size": args.chunk_size or settings.chunk_size,
                    "chunk_seconds": args.chunk_seconds or settings.chunk_seconds,
                }
            ),
            observers=SnapshotObservers(on_progress=progress),
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

    config, destination = destination_of(args)

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
