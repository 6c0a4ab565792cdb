"""The `cdc-platform` command line: :func:`main` parses and dispatches (``parser.py`` builds
the parser; one module per command family holds its handlers: ``config_commands.py``,
``run_commands.py``, ``inspect_commands.py``, ``side_work_commands.py``, and ``arguments.py``
what they share); :func:`console` is the console script."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

from cdc_platform.cli.parser import build_parser
from cdc_platform.errors import CdcError
from cdc_platform.infra.lean_imports import keep_out_unused_libraries, return_freed_memory
from cdc_platform.infra.process_exit import exit_code, exit_process

__all__ = ["build_parser", "console", "main"]

Handler = Callable[[argparse.Namespace], int]


def main(argv: Sequence[str] | None = None, *, lean: bool = False) -> int:
    """Entry point of the console script. ``lean`` (the console script's own process): the
    long-running commands keep unused libraries out (``infra/lean_imports.py``)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if lean and getattr(args, "lean", False):
        keep_out_unused_libraries()
        return_freed_memory()
    if getattr(args, "log_format", "text") == "json":
        from cdc_platform.infra.json_log import JsonFormatter  # noqa: PLC0415 (light CLI)

        handler_ = logging.StreamHandler()
        handler_.setFormatter(JsonFormatter(getattr(args, "destination", None)))
        logging.basicConfig(level=logging.INFO, handlers=[handler_])
    else:
        logging.basicConfig(
            level=logging.INFO,
            format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        )
    handler: Handler = args.handler
    try:
        return handler(args)
    except CdcError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def console() -> NoReturn:
    """The ``cdc-platform`` console script: :func:`main`, then the process ends with its code
    without native libraries' interpreter-exit teardown (see ``infra/process_exit.py``)."""
    try:
        code = main(lean=True)
    except SystemExit as exc:  # argparse's --help and usage errors
        code = exit_code(exc)
    exit_process(code)
