"""Ending a command-line process without running native libraries' teardown.

pyarrow's dataset scanner leaves worker threads that its own shutdown at interpreter exit can
abort on (``terminate called without an active exception``, exit 134), after all work is done
(measured here: a process that read a Delta table through ``to_pyarrow_dataset()`` aborted at
exit in 7 of 12 runs). A supervisor would take that for a failed command. The console script
therefore flushes what Python buffers and ends the process with the command's own exit code,
without interpreter teardown. Everything a command starts (servers, Spark sessions, threads) it
stops itself before returning, so nothing relies on that teardown.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from typing import NoReturn

__all__ = ["exit_code", "exit_process"]


def exit_code(exc: SystemExit) -> int:
    """The process exit code ``SystemExit`` stands for (a message means failure, as Python does)."""
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    print(exc.code, file=sys.stderr)
    return 1


def exit_process(code: int) -> NoReturn:
    """Flush logging and standard streams, then end the process at once with ``code``."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # closed or broken pipe: nothing to save
            stream.flush()
    os._exit(code)
