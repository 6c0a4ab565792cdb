"""cdc-platform as a reader of bench/peers.py, in its own process, timed like the JVM peers.

    python bench/peers/cdc_reader.py --mode decode|delta --host H --port P --user U
        --password-env VAR --file F --pos N --rows R --work DIR

``decode``: BinlogSource.events() from F:N, counting row events (the peer of a counting
consumer); ``delta``: the whole pipeline (DestinationRuntime) from F:N into a Delta change log
under DIR, until R rows are committed. Both with the configuration's defaults (decode_workers
auto). The clock starts at this file's first line, before any import, as the JVM harnesses'
starts at ``main``. Ends with one ``PEER_RESULT`` line.
"""

# ruff: noqa: E402 -- the clock starts before the imports it measures

from __future__ import annotations

import time

BEGAN = time.perf_counter()

import argparse
import os
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from peer_results import result_line

from cdc_platform.infra.lean_imports import keep_out_unused_libraries, return_freed_memory

keep_out_unused_libraries()  # as `cdc-platform run` does, before pyarrow would load numpy
return_freed_memory()  # and its allocator settings, before pyarrow and deltalake load

from cdc_platform.config.instance import InstanceConfig
from cdc_platform.config.source import SourceConfig
from cdc_platform.config.start import StartConfig
from cdc_platform.events import EventKind, ResumePosition
from cdc_platform.runtime import DestinationRuntime
from cdc_platform.sink.destination_lake import DestinationLake
from cdc_platform.sink.term import WriteTerm
from cdc_platform.source import BinlogSource


def decode(args: argparse.Namespace) -> tuple[int, float, float]:
    config = SourceConfig(
        host=args.host, port=args.port, user=args.user, password_env=args.password_env,
        server_id=5301, include_tables=[r"bench\..*"],
    )  # fmt: skip
    source = BinlogSource(config, resume=ResumePosition(args.file, args.pos))
    seen, first, last = 0, 0.0, 0.0
    stream = source.events()
    try:
        for event in stream:
            if event.kind is EventKind.ROW:
                seen += 1
                if seen == 1:
                    first = time.perf_counter() - BEGAN
                if seen == args.rows:
                    last = time.perf_counter() - BEGAN
                    break
    finally:
        source.stop()
        stream.close()
    return seen, first, last or time.perf_counter() - BEGAN


def delta(args: argparse.Namespace) -> tuple[int, float, float]:
    config = InstanceConfig(
        source=SourceConfig(
            host=args.host, port=args.port, user=args.user, password_env=args.password_env,
            server_id=5302, include_tables=[r"bench\..*"],
        ),
        start=StartConfig(mode="position", file=args.file, pos=args.pos),
    )  # fmt: skip
    layout = DestinationLake.at(Path(args.work).parent, Path(args.work).name)  # <work>/changes
    runtime = DestinationRuntime(WriteTerm("peers", config, layout), metrics_interval_seconds=3600)
    first, last = [0.0], [0.0]

    def watch() -> None:
        while True:
            committed = runtime.metrics().rows_total
            if committed and not first[0]:
                first[0] = time.perf_counter() - BEGAN
            if committed >= args.rows:
                last[0] = time.perf_counter() - BEGAN
                runtime.request_stop("all rows committed")
                return
            time.sleep(0.05)  # a faster poll steals the GIL from the pipeline it measures

    threading.Thread(target=watch, daemon=True).start()
    runtime.run(exit_when_idle_seconds=60)
    return runtime.metrics().rows_total, first[0], last[0] or time.perf_counter() - BEGAN


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mode", choices=["decode", "delta"], required=True)
    parser.add_argument("--host", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--user", required=True)
    parser.add_argument("--password-env", required=True)
    parser.add_argument("--file", required=True)
    parser.add_argument("--pos", type=int, required=True)
    parser.add_argument("--rows", type=int, required=True)
    parser.add_argument("--work", required=True)
    args = parser.parse_args()
    # The last row's time: for delta, when the watcher saw the commit that carried it.
    seen, first, last = decode(args) if args.mode == "decode" else delta(args)
    print(result_line(seen, last, first, seen >= args.rows), flush=True)
    os._exit(0)  # as the console script ends: no interpreter teardown


if __name__ == "__main__":
    main()
