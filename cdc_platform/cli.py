"""The `cdc-platform` command line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from cdc_platform import __version__
from cdc_platform.config import load_config
from cdc_platform.errors import CdcError

__all__ = ["main"]

Handler = Callable[[argparse.Namespace], int]


def _config_check(args: argparse.Namespace) -> int:
    config = load_config(Path(args.conf))
    names = sorted({*config.destinations, *config.errors})
    if not names:
        print(f"no destinations under {Path(args.conf) / 'destinations'}")
    for name in names:
        if name in config.destinations:
            dest = config.destinations[name]
            state = "OK" if dest.config.enabled else "OK (disabled)"
            print(f"{name}: {state}  {dest.path}  sha256:{dest.content_hash[:12]}")
        else:
            print(f"{name}: ERROR {config.errors[name]}")
    return 1 if config.errors else 0


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
    check.set_defaults(handler=_config_check)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    handler: Handler = args.handler
    try:
        return handler(args)
    except CdcError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
