"""cdc-platform against Debezium, Flink CDC and Canal on the same binlog backlog, in one run.

    .venv/bin/python bench/peers.py [--rows 100000] [--workloads insert,update,wide,oltp]
        [--readers debezium-count,debezium-file,flink-cdc,canal,cdc-decode,cdc-delta] [--setup]

The "backlog drain" protocol, per workload of bench/throughput.py (bulk insert, update-heavy,
wide 50-column, single-row oltp): pin the binlog position (file, position and the MariaDB GTID
position together), write the workload, then start each reader from the pinned position, one
after another, and time it until it has seen every row. Readers:

- ``debezium-count``: Debezium's embedded engine with its MariaDB connector, a consumer that
  counts records (offsets in a file); every ratio is taken to it;
- ``debezium-file``: the same with a consumer that writes each record as JSON to a file,
  flushed once a batch (the nearest peer of a durable sink);
- ``flink-cdc``: Flink CDC's MySQL source (file/position start) in a local mini-cluster, into a
  sink that counts and discards;
- ``canal``: Canal's binlog parser (``MysqlEventParser``, file/position start) on its own,
  into an event sink that counts the rows of each row-change entry (log positions in a file);
- ``cdc-decode``: cdc-platform's BinlogSource counting row events (the peer of a counting
  consumer); ``cdc-delta``: cdc-platform's whole path into a Delta change log (committed).

Each reader runs as its own process group; its peak RSS is the largest sum of RSS over its
process tree, sampled every 0.1 s, and its peak PSS the same with each shared page counted once
(cdc-platform's decode workers are forked processes sharing pages with their parent). Its
rows/s is rows over its own time from its start (the JVM's ``main``, the Python file's first
line) to the last row; ``drain/s`` leaves out the time to the first row (for ``cdc-delta``: to
the first commit). JVM harnesses run with the JVM's default heap settings.

The JVM harnesses are built by Maven on first use or with ``--setup`` (dependencies go to the
local Maven cache, the jars to bench/peers/*/target/, never committed); a Java 17 JDK and Maven
are needed for them, and nothing of them for the project's tests.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import throughput
from peer_results import ReaderResult, ResultLineMissingError, parse_result, table

from cdc_platform.testing.mariadb import MariaDBServer

HERE = Path(__file__).resolve().parent
PEERS = HERE / "peers"
PASSWORD_ENV = "BENCH_PEER_PASSWORD"


@dataclass(frozen=True)
class JvmHarness:
    """A Maven project under bench/peers/ and the class its jar runs."""

    directory: str
    main_class: str
    first: tuple[str, ...] = ()
    """Jars of target/lib/ put before the others: Flink CDC's connector carries patched copies
    of Debezium classes that must win over Debezium's own jars."""

    @property
    def target(self) -> Path:
        return PEERS / self.directory / "target"

    def classpath(self) -> str:
        jars = sorted(self.target.glob("peer-*.jar"))
        for pattern in self.first:
            jars += sorted((self.target / "lib").glob(pattern))
        return os.pathsep.join([*map(str, jars), str(self.target / "lib" / "*")])

    def built(self) -> bool:
        return any(self.target.glob("peer-*.jar")) and (self.target / "lib").is_dir()


DEBEZIUM = JvmHarness("debezium", "bench.peers.DebeziumPeer")
FLINK_CDC = JvmHarness(
    "flink-cdc", "bench.peers.FlinkCdcPeer", first=("flink-connector-mysql-cdc-*.jar",)
)
CANAL = JvmHarness("canal", "bench.peers.CanalPeer")
HARNESSES = (DEBEZIUM, FLINK_CDC, CANAL)
READER_HARNESS = {
    "debezium-count": DEBEZIUM, "debezium-file": DEBEZIUM, "flink-cdc": FLINK_CDC, "canal": CANAL,
}  # fmt: skip
READERS = ("debezium-count", "debezium-file", "flink-cdc", "canal", "cdc-decode", "cdc-delta")
JAVA_OPTS = (
    "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
    "-Djava.util.logging.config.file=/dev/null",
)
# Flink 1.18 on Java 17 needs the JDK's internals opened (Flink's own start scripts add these).
FLINK_OPENS = tuple(
    f"--add-opens=java.base/{package}=ALL-UNNAMED"
    for package in (
        "java.lang", "java.util", "java.lang.reflect", "java.io", "java.net", "java.nio",
        "java.util.concurrent", "java.util.concurrent.atomic", "java.time", "java.text",
        "sun.nio.ch",
    )
)  # fmt: skip


class ToolMissing(SystemExit):
    """Java or Maven is not installed: the one message the bench prints before it stops."""


def require_tools(*, compiling: bool) -> None:
    """Stop with one message if a tool the JVM harnesses need is missing (``javac`` only when a
    harness is still to be built: Maven compiles with the JDK's compiler, a JRE has none)."""
    tools = ("java", "mvn", "javac") if compiling else ("java",)
    missing = [tool for tool in tools if shutil.which(tool) is None]
    if missing:
        raise ToolMissing(
            f"bench/peers.py: {', '.join(missing)} not found on PATH. The peers are JVM "
            "programs built by Maven: install a Java 17 JDK and Maven (Debian: "
            "default-jdk-headless maven), or run only the cdc-platform readers with "
            "--readers cdc-decode,cdc-delta."
        )


def build(harness: JvmHarness, *, force: bool = False) -> None:
    """``mvn package`` of one harness (dependencies into the local Maven cache)."""
    if harness.built() and not force:
        return
    print(f"building bench/peers/{harness.directory} with Maven ...", flush=True)
    done = subprocess.run(
        ["mvn", "-B", "-q", "package"],
        cwd=PEERS / harness.directory,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        sys.exit(f"mvn package failed in bench/peers/{harness.directory}:\n{done.stdout[-3000:]}")


def tree_memory_mb(root: int) -> tuple[float, float]:
    """(summed VmRSS, summed Pss) of ``root`` and its descendants, from /proc. The RSS sum
    counts pages that forked decode workers share with their parent once per process; the
    PSS sum counts each page once (for a single process such as a JVM the two agree but for
    shared libraries)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        parent = int(text[text.rindex(")") + 2 :].split()[1])
        children.setdefault(parent, []).append(int(stat.parent.name))
    rss, pss, todo = 0, 0, [root]
    while todo:
        pid = todo.pop()
        todo.extend(children.get(pid, ()))
        try:
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Rss:"):
                    rss += int(line.split()[1])
                elif line.startswith("Pss:"):
                    pss += int(line.split()[1])
        except OSError:
            continue
    return rss / 1024, pss / 1024


def run_reader(name: str, command: Sequence[str], timeout: float) -> ReaderResult:
    """Run one reader in its own process group, sample its tree's RSS, kill the group at the
    end (no stray JVM or decode worker survives), and parse its result line."""
    began = time.monotonic()
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    peak = [0.0, 0.0]
    finished = threading.Event()

    def sample() -> None:
        while not finished.is_set():
            rss, pss = tree_memory_mb(process.pid)
            peak[:] = [max(peak[0], rss), max(peak[1], pss)]
            finished.wait(0.1)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
    finally:
        finished.set()
        sampler.join()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
    try:
        result = parse_result(name, stdout, peak[0], peak[1])
    except ResultLineMissingError:
        print(f"{name} failed (exit {process.returncode}):\n{stderr[-3000:]}", file=sys.stderr)
        return ReaderResult(name, 0, time.monotonic() - began, 0.0, False, peak[0], peak[1])
    if not result.complete:
        print(f"{name}: incomplete; its stderr:\n{stderr[-3000:]}", file=sys.stderr)
    return result


@dataclass(frozen=True)
class Pin:
    """The binlog position the workload starts at, in both forms the readers take."""

    file: str
    pos: int
    gtids: str


def reader_command(
    name: str, pin: Pin, *, host: str, port: int, user: str, rows: int, work: Path, timeout: float
) -> list[str]:
    common = [
        "--host", host, "--port", str(port), "--user", user, "--password-env", PASSWORD_ENV,
        "--file", pin.file, "--pos", str(pin.pos), "--rows", str(rows),
    ]  # fmt: skip
    if name.startswith("debezium"):
        mode = name.split("-", 1)[1]
        return [
            "java", *JAVA_OPTS, "-cp", DEBEZIUM.classpath(), DEBEZIUM.main_class, *common,
            "--gtids", pin.gtids, "--mode", mode, "--work", str(work),
            "--out", str(work / "records.jsonl"), "--timeout", str(int(timeout)),
        ]  # fmt: skip
    if name == "flink-cdc":
        return [
            "java", *JAVA_OPTS, *FLINK_OPENS, "-cp", FLINK_CDC.classpath(), FLINK_CDC.main_class,
            *common, "--timeout", str(int(timeout)),
        ]  # fmt: skip
    if name == "canal":
        return [
            "java", *JAVA_OPTS, "-cp", CANAL.classpath(), CANAL.main_class, *common,
            "--work", str(work), "--timeout", str(int(timeout)),
        ]  # fmt: skip
    mode = name.split("-", 1)[1]
    return [
        sys.executable,
        str(PEERS / "cdc_reader.py"),
        "--mode",
        mode,
        *common,
        "--work",
        str(work),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--wide-rows", type=int, default=0, help="default: --rows / 4")
    parser.add_argument("--workloads", default="insert,update,wide,oltp")
    parser.add_argument("--readers", default=",".join(READERS))
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per reader")
    parser.add_argument("--setup", action="store_true", help="(re)build the JVM harnesses, exit")
    args = parser.parse_args()
    # A SIGTERM unwinds like Ctrl-C, so the running reader's process group is killed too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    readers = args.readers.split(",")
    unknown = set(readers) - set(READERS)
    if unknown:
        parser.error(f"unknown readers {sorted(unknown)}; known: {', '.join(READERS)}")
    harnesses = [h for h in HARNESSES if any(READER_HARNESS.get(r) is h for r in readers)]
    if harnesses or args.setup:
        require_tools(compiling=args.setup or not all(h.built() for h in harnesses))
    for harness in HARNESSES if args.setup else harnesses:
        build(harness, force=args.setup)
    if args.setup:
        return

    chosen = args.workloads.split(",")
    print(f"cores {os.cpu_count()}; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    with tempfile.TemporaryDirectory(prefix="cdc-bench-peers-") as tmp:
        root = Path(tmp)
        with MariaDBServer(root / "mariadb") as server:
            user = server.create_replication_user("bench", "bench-pw")
            # Debezium's documented grants: ours, plus RELOAD and SHOW DATABASES.
            server.execute(f"GRANT RELOAD, SHOW DATABASES ON *.* TO '{user.name}'@'%'")
            os.environ[PASSWORD_ENV] = user.password
            server.execute(
                "CREATE DATABASE bench", throughput.ITEMS, throughput.COUNTERS, throughput.WIDE
            )
            throughput.seed_counters(server, min(args.rows, 50_000))
            for name, (rows, write) in throughput.workloads(args).items():
                if name not in chosen:
                    continue
                position = server.binlog_position()
                gtids = str(server.query("SELECT @@gtid_binlog_pos")[0][0])
                pin = Pin(position.file, position.pos, gtids)
                began = time.perf_counter()
                write(server)
                print(
                    f"{name}: wrote {rows} rows in {time.perf_counter() - began:.1f} s", flush=True
                )
                results = []
                for reader in readers:
                    work = root / name / reader
                    work.mkdir(parents=True)
                    command = reader_command(
                        reader, pin, host=server.host, port=server.port, user=user.name,
                        rows=rows, work=work, timeout=args.timeout,
                    )  # fmt: skip
                    result = run_reader(reader, command, args.timeout + 60)
                    results.append(result)
                    print(
                        f"  {reader}: {result.rows} rows, {result.elapsed_s:.1f} s, "
                        f"peak RSS {result.peak_rss_mb:.0f} MB, PSS {result.peak_pss_mb:.0f} MB",
                        flush=True,
                    )
                print(table(name, rows, results))
                load = " ".join(f"{x:.2f}" for x in os.getloadavg())
                print(f"load average after {name}: {load}\n", flush=True)


if __name__ == "__main__":
    main()
