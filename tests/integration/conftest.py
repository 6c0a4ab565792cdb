"""Fixtures shared by the integration tests: the Spark engines, each started once per session.

* ``spark`` / ``spark_factory``: the embedded engine (Sail), in this process.
* ``spark_engine`` (parametrise it indirectly with
  :data:`cdc_platform.testing.spark_engines.ENGINES`): the same test on Sail, on
  classic Apache Spark with delta-spark (one JVM per test process) and on a real Apache Spark
  Connect server (one private server per test process, 127.0.0.1, a free port). Both JVM
  engines start on first use and know the session's S3 server (SeaweedFS), so a test can put
  its lake on S3 too.

PySpark's functions speak either classic or Spark Connect, chosen by the process environment
(``SPARK_CONNECT_MODE_ENABLED``): ``spark_engine`` sets or clears that mark for the test's
duration, so the three engines take turns in one test process.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from pyspark.sql import SparkSession

from cdc_platform.config.lake import LakeLocation
from cdc_platform.config.platform import SparkConfig
from cdc_platform.spark.session import CONNECT_MARK, SparkSessionFactory, stop_embedded_server
from cdc_platform.spark.storage import s3a_conf
from cdc_platform.testing.seaweedfs import SeaweedFSServer
from cdc_platform.testing.spark_connect import SMALL_DATA_CONF, SMALL_LOCAL_CONF, SparkConnectServer
from cdc_platform.testing.spark_engines import SparkEngine
from tests.conftest import MariaDBDatabase

if TYPE_CHECKING:
    from dagster import DagsterInstance

    from tests.integration.dagster_daemon import Daemon


@pytest.fixture(scope="session")
def spark_factory() -> Iterator[SparkSessionFactory]:
    """The embedded-mode factory; its Sail server lives for the whole test session."""
    factory = SparkSessionFactory(SparkConfig())
    try:
        yield factory
    finally:
        factory.stop()
        stop_embedded_server()


@pytest.fixture
def spark(spark_factory: SparkSessionFactory, monkeypatch: pytest.MonkeyPatch) -> SparkSession:
    """A Spark Connect session on the embedded Sail server (the same one unless a test
    stopped the server, in which case a new server and session are made).

    PySpark's Connect mark is set for the test: a :func:`spark_engine` test that made the
    session first cleared it again at its end (its monkeypatch restores the environment).

    Sail ends a session idle for 15 minutes (its ``spark.session_timeout_secs``); in a
    parallel run a worker may go that long between Spark tests, so a session the server no
    longer knows is replaced."""
    monkeypatch.setenv(CONNECT_MARK, "1")
    session = spark_factory.session()
    try:
        session.range(1).collect()
    except Exception:  # pyspark's Connect errors have no common base with grpc's
        spark_factory.stop()
        session = spark_factory.session()
    return session


def _s3_lake(seaweedfs: SeaweedFSServer) -> LakeLocation:
    """A lake on the session's S3 server: what gives a JVM engine its ``fs.s3a`` settings."""
    return LakeLocation.resolve(
        f"s3://{seaweedfs.bucket}/engine", Path("/"), environ=seaweedfs.environment()
    )


@pytest.fixture(scope="session")
def classic_factory(
    tmp_path_factory: pytest.TempPathFactory, seaweedfs: SeaweedFSServer
) -> Iterator[SparkSessionFactory]:
    """Classic Apache Spark with delta-spark on the installed jars; the JVM starts on the
    first ``session()`` (under :func:`spark_engine`, with the S3 server's AWS variables)."""
    work = tmp_path_factory.mktemp("spark-classic")
    config = SparkConfig(
        mode="classic",
        master="local[2]",
        conf={
            **SMALL_LOCAL_CONF,
            **SMALL_DATA_CONF,
            "spark.sql.warehouse.dir": str(work / "warehouse"),
            "spark.local.dir": str(work),
        },
    )
    factory = SparkSessionFactory(config, _s3_lake(seaweedfs))
    try:
        yield factory
    finally:
        factory.stop()


@pytest.fixture(scope="session")
def spark_connect_server(
    tmp_path_factory: pytest.TempPathFactory, seaweedfs: SeaweedFSServer
) -> Iterator[SparkConnectServer]:
    """A private Apache Spark Connect server with Delta and S3A (the S3 server's settings and
    credentials in its own environment)."""
    server = SparkConnectServer(
        tmp_path_factory.mktemp("spark-connect"),
        conf={
            **s3a_conf(_s3_lake(seaweedfs), environ=seaweedfs.environment()),
            **SMALL_DATA_CONF,
        },
        environment=seaweedfs.environment(),
    )
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def connect_factory(spark_connect_server: SparkConnectServer) -> Iterator[SparkSessionFactory]:
    """Mode ``connect`` pointed at the private Apache Spark Connect server."""
    factory = SparkSessionFactory(SparkConfig(mode="connect", connect_url=spark_connect_server.url))
    try:
        yield factory
    finally:
        factory.stop()


@pytest.fixture
def spark_engine(
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
    seaweedfs: SeaweedFSServer,
) -> Iterator[SparkEngine]:
    """The engine named by the test's parameter, with PySpark's mode mark set to match."""
    name: str = request.param
    if name == "classic":
        monkeypatch.delenv(CONNECT_MARK, raising=False)
        factory: SparkSessionFactory = request.getfixturevalue("classic_factory")
        with monkeypatch.context() as launch:  # the JVM inherits the S3 credentials
            for key, value in seaweedfs.environment().items():
                launch.setenv(key, value)
            factory.session()
    else:
        monkeypatch.setenv(CONNECT_MARK, "1")
        fixture = "spark_factory" if name == "embedded" else "connect_factory"
        factory = request.getfixturevalue(fixture)
    engine = SparkEngine(name, factory.config, factory)
    yield engine
    if name == "connect" and getattr(getattr(request.node, "rep_call", None), "failed", False):
        server: SparkConnectServer = request.getfixturevalue("spark_connect_server")
        print(f"\n--- Spark Connect server log ({server.log_path}) ---")
        print(server.log_tail())


@pytest.fixture
def dagster_daemon(tmp_path: Path, mariadb: MariaDBDatabase) -> Iterator[Daemon]:
    """A real Dagster daemon (not yet started: a test writes what its code location should
    see first) with its own instance and conf directory; stopped with every process it
    started."""
    from tests.integration.dagster_daemon import daemon_for  # noqa: PLC0415 (imports dagster)

    handle = daemon_for(tmp_path, mariadb)
    try:
        yield handle
    finally:
        handle.stop()


@pytest.fixture
def daemon(dagster_daemon: Daemon) -> tuple[DagsterInstance, Path]:
    """A daemon started over an empty conf directory (destinations come and go later)."""
    return dagster_daemon.start(), dagster_daemon.conf
