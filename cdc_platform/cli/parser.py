"""The `cdc-platform` argument parser: one subparser per command, each naming its handler."""

from __future__ import annotations

import argparse
from typing import Any

from cdc_platform import __version__
from cdc_platform.cli.config_commands import config_check_command, import_canal_command
from cdc_platform.cli.inspect_commands import (
    checkpoint_show_command,
    release_command,
    status_command,
    tables_command,
)
from cdc_platform.cli.run_commands import demo_command, run_command, serve_command
from cdc_platform.cli.side_work_commands import reconcile_command, snapshot_command

__all__ = ["build_parser"]


def _add_destination_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--conf", default="conf", help="configuration directory (default: conf)")
    parser.add_argument("--destination", required=True, help="destination name")


def _add_serve_parser(commands: Any) -> None:
    """`serve` (its own function: the parser builder is long enough)."""
    serve = commands.add_parser(
        "serve",
        help="run every enabled destination of the conf directory; follow its changes",
    )
    serve.add_argument("--conf", default="conf", help="configuration directory (default: conf)")
    serve.add_argument(
        "--metrics-interval",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="log each destination's progress this often (default: 10)",
    )
    serve.add_argument(
        "--address",
        help="this process's name in every lease (default: lease.address, or serve@host:pid)",
    )
    _add_operations_args(serve)
    serve.set_defaults(handler=serve_command, lean=True)


def _add_snapshot_parser(commands: Any) -> None:
    """`snapshot` (its own function: the parser builder is long enough)."""
    snapshot = commands.add_parser(
        "snapshot",
        help="copy existing rows into the change log (chunked, lock-free, resumable)",
    )
    _add_destination_args(snapshot)
    snapshot.add_argument(
        "--table",
        action="append",
        metavar="DB.TABLE",
        help="table to snapshot (repeatable; default: every table the destination captures)",
    )
    snapshot.add_argument(
        "--chunk-size",
        type=int,
        default=None,
        help="fixed rows per chunk (default: snapshot.chunk_size, else sized by time)",
    )
    snapshot.add_argument(
        "--chunk-seconds",
        type=float,
        default=None,
        metavar="SECONDS",
        help="target time per chunk when the size is not fixed (default: "
        "snapshot.chunk_seconds, 0.5)",
    )
    snapshot.add_argument(
        "--lease-timeout",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="wait this long for the destination's lease (default: 30)",
    )
    snapshot.add_argument(
        "--request",
        action="store_true",
        help="do not take the lease: ask the destination's running node to snapshot the "
        "--table list between two batches, without stopping its run",
    )
    snapshot.add_argument(
        "--wait",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="with --request: wait this long for the answer (default: 0, return at once)",
    )
    snapshot.set_defaults(handler=snapshot_command)


def _add_import_canal_parser(commands: Any) -> None:
    """`import-canal` (its own function: the parser builder is long enough)."""
    parser = commands.add_parser(
        "import-canal",
        help="write destinations from a Canal conf directory (canal.properties and each "
        "<destination>/instance.properties)",
    )
    parser.add_argument("canal_dir", metavar="CANAL_CONF_DIR", help="Canal's conf directory")
    parser.add_argument(
        "--out", default="conf", help="configuration directory to write (default: conf)"
    )
    parser.set_defaults(handler=import_canal_command)


def _add_operations_args(parser: argparse.ArgumentParser) -> None:
    """The metrics endpoint and log format of the long-running commands (`run`, `serve`)."""
    parser.add_argument(
        "--metrics-port",
        type=int,
        metavar="PORT",
        help="serve Prometheus metrics on this port, 0 for a free one (default: metrics.port "
        "in platform.yaml; none if unset)",
    )
    parser.add_argument(
        "--metrics-host", metavar="HOST", help="metrics address (default: metrics.host)"
    )
    parser.add_argument(
        "--log-format",
        choices=("text", "json"),
        default="text",
        help="json: one JSON object per line (default: text)",
    )


def _add_tables_parser(commands: Any) -> None:
    """`tables` (its own function: the parser builder is long enough)."""
    tables = commands.add_parser(
        "tables",
        help="the source tables a destination captures and the ones its filters skip, and why",
    )
    _add_destination_args(tables)
    tables.add_argument("--json", action="store_true", help="machine-readable output")
    tables.set_defaults(handler=tables_command)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser; each subcommand stores its handler in `handler`."""
    parser = argparse.ArgumentParser(
        prog="cdc-platform",
        description="Change data capture from MySQL/MariaDB binlogs into Delta Lake.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    config = commands.add_parser("config", help="inspect the configuration")
    config_commands = config.add_subparsers(dest="config_command", metavar="COMMAND", required=True)
    check = config_commands.add_parser(
        "check", help="validate every destination; exit 1 if any is bad"
    )
    check.add_argument("--conf", default="conf", help="configuration directory (default: conf)")
    check.add_argument(
        "--connect",
        action="store_true",
        help="also connect to each destination's source and check its settings (exit 1 if any "
        "cannot be used)",
    )
    check.set_defaults(handler=config_check_command)

    run = commands.add_parser("run", help="run one destination in the foreground")
    _add_destination_args(run)
    run.add_argument(
        "--exit-when-idle",
        type=float,
        metavar="SECONDS",
        help="stop once no event arrived for this long (default: run until stopped)",
    )
    run.add_argument(
        "--metrics-interval",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="log progress this often (default: 10)",
    )
    run.add_argument(
        "--address",
        help="this process's name in the lease (default: host:pid, or lease.address)",
    )
    _add_operations_args(run)
    run.set_defaults(handler=run_command, lean=True)

    _add_serve_parser(commands)

    status = commands.add_parser(
        "status", help="each destination: lease holder, epoch, position, lag, standbys"
    )
    status.add_argument("--conf", default="conf", help="configuration directory (default: conf)")
    status.add_argument("--destination", help="only this destination")
    status.add_argument("--json", action="store_true", help="machine-readable output")
    status.set_defaults(handler=status_command)

    _add_tables_parser(commands)

    release = commands.add_parser(
        "release", help="manual switch-over: ask the lease holder to step aside"
    )
    _add_destination_args(release)
    release.set_defaults(handler=release_command)

    checkpoint = commands.add_parser("checkpoint", help="inspect a destination's checkpoint")
    checkpoint_commands = checkpoint.add_subparsers(
        dest="checkpoint_command", metavar="COMMAND", required=True
    )
    show = checkpoint_commands.add_parser("show", help="print the last committed position")
    _add_destination_args(show)
    show.set_defaults(handler=checkpoint_show_command)
    _add_snapshot_parser(commands)
    _add_import_canal_parser(commands)
    reconcile = commands.add_parser(
        "reconcile",
        help="compare source tables with their mirrors; repair differences through the log",
    )
    _add_destination_args(reconcile)
    reconcile.add_argument(
        "--table",
        action="append",
        metavar="DB.TABLE",
        help="table to reconcile (repeatable; default: every table the destination captures)",
    )
    reconcile.add_argument(
        "--chunk-size",
        type=int,
        default=None,
        help="source rows per checksum chunk (default: reconcile.chunk_size, 10000)",
    )
    reconcile.add_argument(
        "--wait",
        type=float,
        default=None,
        metavar="SECONDS",
        help="how long the lease holder may take to claim the repair (default: 300)",
    )
    reconcile.add_argument("--json", action="store_true", help="machine-readable report")
    reconcile.set_defaults(handler=reconcile_command)
    demo = commands.add_parser(
        "demo", help="private MariaDB + live workload + the shop destination, until Ctrl-C"
    )
    demo.add_argument("--conf", default="conf", help="configuration directory (default: conf)")
    demo.add_argument("--rate", type=float, default=20.0, help="workload transactions per second")
    demo.add_argument(
        "--no-dagster",
        action="store_true",
        help="run the pipeline in this process, without Dagster",
    )
    demo.add_argument("--port", type=int, default=3000, help="Dagster UI port (default: 3000)")
    demo.add_argument(
        "--spark",
        choices=["embedded", "classic"],
        default=None,
        help="engine of the Spark assets (default: spark.mode of the conf); classic: Apache "
        "Spark with delta-spark on the jars scripts/setup.sh installed",
    )
    demo.set_defaults(handler=demo_command)
    return parser
