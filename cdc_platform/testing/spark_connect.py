"""A private Apache Spark Connect server with Delta, started from pyspark's own jars.

The pip package carries the server class (``spark-connect_2.13-<version>.jar``) and
``bin/spark-submit``; delta-spark and hadoop-aws come from the jars ``scripts/setup.sh``
installed (:mod:`cdc_platform.spark.jars`). The server listens on 127.0.0.1 on a free port,
keeps its warehouse, scratch space and log in its own directory, and uses an in-memory
catalog (no Derby metastore in the working directory), so several can run side by side.
"""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Mapping
from pathlib import Path

from cdc_platform.spark.jars import installed_jars
from cdc_platform.spark.session import DELTA_SQL_CONF
from cdc_platform.testing.processes import (
    PrivateServer,
    ServerStartError,
    child_setup,
    tail_of,
    wait_until,
)

__all__ = [
    "SERVER_CLASS",
    "SMALL_DATA_CONF",
    "SMALL_LOCAL_CONF",
    "SparkConnectServer",
    "spark_submit",
]

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"

SMALL_LOCAL_CONF: dict[str, str] = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.log.level": "WARN",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.sql.catalogImplementation": "in-memory",
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.databricks.delta.snapshotPartitions": "2",
    "spark.driver.extraJavaOptions": (
        "-XX:+UseSerialGC -XX:TieredStopAtLevel=1"
        " -XX:-UseCodeCacheFlushing -XX:ReservedCodeCacheSize=256m"
    ),
}
"""A local JVM engine for small tables on a small machine: no UI, two partitions instead of
Spark's 200 shuffle and Delta's 50 snapshot partitions, and a JVM tuned for a quick start
(serial GC, the C1 compiler only), all on 127.0.0.1 with an in-memory catalog.

The code cache is never swept: Spark and Delta compile many short-lived methods, and the
sweeper thread that evicts them took more CPU time than the C1 compiler itself (21 of about
215 CPU-seconds in a suite's Connect server). Kept whole in 256 MiB, three classic Spark tests'
JVM took 136 and 146 CPU-seconds instead of 158 and 170 (two pairs). The full C2 compiler
(tiered) took 185 and 190: it finishes sooner but costs more CPU, the scarcer of the two here."""


SMALL_DATA_CONF: dict[str, str] = {
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
    "spark.sql.adaptive.enabled": "false",
}
"""For tests' tables of a few dozen rows: expressions interpreted instead of compiled to Java,
and plans fixed when made. Each new query shape otherwise pays for code generation and
compilation; on eight small applies this cut the JVM's CPU time by about a third (67 to 46 s,
load average 1.7). Adaptive query execution re-plans every query at each stage, which only
pays on data big enough to skew: turned off, six applies took 59-63 instead of 73-74 JVM
CPU-seconds (two pairs, load 2-6). Results do not depend on either setting. Bigger tables
want both (so neither is in :data:`SMALL_LOCAL_CONF`, which the benches use)."""


def spark_submit() -> Path:
    """pyspark's ``bin/spark-submit``."""
    import pyspark  # noqa: PLC0415 (only to locate its scripts)

    return Path(pyspark.__file__).parent / "bin" / "spark-submit"


class SparkConnectServer(PrivateServer):
    """One ``spark-submit --class SparkConnectServer`` process: start, stop, its ``sc://`` URL.

    ``environment`` is added to the server's environment (e.g. the AWS variables of a test's
    S3 server: S3A's default credential chain reads them there); ``conf`` adds Spark settings
    (e.g. :func:`cdc_platform.spark.storage.s3a_conf`).
    """

    STOP_TIMEOUT = 30.0
    """A JVM takes a while to end."""

    def __init__(
        self,
        base_dir: Path,
        *,
        master: str = "local[2]",
        driver_memory: str = "1g",
        conf: Mapping[str, str] | None = None,
        environment: Mapping[str, str] | None = None,
    ) -> None:
        self.base_dir = base_dir
        self.log_path = base_dir / "spark-connect.log"
        self.host = "127.0.0.1"
        super().__init__()
        self.master = master
        self.driver_memory = driver_memory
        self.conf = dict(conf or {})
        self.environment = dict(environment or {})

    @property
    def url(self) -> str:
        """``sc://127.0.0.1:<port>``."""
        return f"sc://{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        """The server's process id (the JVM: spark-submit execs it)."""
        return self._proc.pid if self._proc is not None else None

    def command(self) -> list[str]:
        """The spark-submit command line."""
        scratch = self.base_dir / "scratch"
        settings = {
            **DELTA_SQL_CONF,
            **SMALL_LOCAL_CONF,
            "spark.connect.grpc.binding.address": self.host,
            "spark.connect.grpc.binding.port": str(self.port),
            "spark.sql.warehouse.dir": str(self.base_dir / "warehouse"),
            "spark.local.dir": str(scratch),
            "spark.sql.session.timeZone": "UTC",
            **self.conf,
        }
        cmd = [
            str(spark_submit()),
            "--master",
            self.master,
            "--driver-memory",
            self.driver_memory,
            "--class",
            SERVER_CLASS,
            "--name",
            "cdc-platform-spark-connect",
            "--jars",
            ",".join(installed_jars()),
        ]
        for key, value in settings.items():
            cmd += ["--conf", f"{key}={value}"]
        return [*cmd, "spark-internal"]

    START_TIMEOUT = 300.0

    def _start_once(self, timeout: float) -> None:
        """Start the server and wait until its gRPC port accepts connections."""
        if self.running:
            return
        self.base_dir.mkdir(parents=True, exist_ok=True)
        (self.base_dir / "scratch").mkdir(exist_ok=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK_")}
        for mark in ("SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE", "SPARK_LOCAL_REMOTE"):
            env.pop(mark, None)
        env |= self.environment
        log = self.log_path.open("ab")
        self._proc = subprocess.Popen(
            self.command(),
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=self.base_dir,
            env=env,
            start_new_session=True,
            preexec_fn=child_setup(),  # noqa: PLW1509 (only from the main thread)
        )
        log.close()
        proc = self._proc

        def ready() -> bool:
            if proc.poll() is not None:
                raise ServerStartError(
                    f"Spark Connect server exited with {proc.returncode}\n{tail_of(self.log_path)}"
                )
            try:
                with socket.create_connection((self.host, self.port), timeout=1):
                    return True
            except OSError:
                return False

        wait_until(ready, timeout=timeout, what="Spark Connect server", log=self.log_path)

    def log_tail(self, lines: int = 60) -> str:
        """The end of the server's log, for failure reports."""
        return tail_of(self.log_path, lines)
