"""The long-running commands: `run` (one destination in the foreground), `serve` (every
destination of a conf directory) and `demo`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from cdc_platform.cli.arguments import destination_of, metrics_of
from cdc_platform.config import load_config
from cdc_platform.config.deployment import check_deployment
from cdc_platform.infra.signals import stop_signals

__all__ = ["demo_command", "run_command", "serve_command"]


def run_command(args: argparse.Namespace) -> int:
    from cdc_platform.runtime.supervised import supervised_destination  # noqa: PLC0415 (loaded by this command only: the CLI starts light)

    config, destination = destination_of(args)
    metrics = metrics_of(args, config)
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
        metrics=metrics_of(args, config),
    )

    with stop_signals(server.request_stop, on_hup=server.rescan):
        left = server.run()
    if left:
        print(f"error: not stopped in time: {', '.join(left)}", file=sys.stderr)
        return 1
    print(f"{address}: every destination stopped")
    return 0


def demo_command(args: argparse.Namespace) -> int:
    from cdc_platform.demo import run_demo  # noqa: PLC0415 (only the demo needs the test servers)

    return run_demo(
        Path(args.conf),
        rate=args.rate,
        with_dagster=not args.no_dagster,
        port=args.port,
        spark_mode=args.spark,
    )
