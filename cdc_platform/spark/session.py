"""Spark sessions for the three engine modes, chosen only by `conf/platform.yaml` (`spark:`).

* ``embedded`` (default): Sail's Spark Connect server, in this process (no JVM). It is started
  lazily, once per process, by whichever thread asks first, and stopped at interpreter exit, so
  Dagster step processes and tests pay its ~1 s start once.
* ``connect``: a Spark Connect URL (`sc://host:15002`), e.g. Apache Spark with Delta.
* ``classic``: a PySpark session with a master URL, on the delta-spark and hadoop-aws jars
  ``scripts/setup.sh`` installed (:mod:`.jars`; ``spark.jars: maven`` resolves them at start
  instead, ``provided`` leaves them to the cluster or to ``conf``).

Every session runs in UTC (``spark.sql.session.timeZone``): day boundaries of the history
figures and the TIMESTAMP / DATETIME conversions of the mirrors must not depend on the
machine. PySpark decides per process whether ``pyspark.sql.functions`` talk Spark Connect or
classic Spark, so one process uses either a connect-style mode (embedded, connect) or classic;
it also marks the environment (``SPARK_CONNECT_MODE_ENABLED``), which a child process must not
inherit if it is to run classic Spark, and a classic session is refused while the mark is set.

Given the lake (``config.lake``), a factory makes the engine read and write a lake on S3 with
the same settings as delta-rs (:mod:`.storage`): Sail through the AWS environment,
connect / classic through the equivalent ``spark.hadoop.fs.s3a.*`` settings.
"""

from __future__ import annotations

import atexit
import logging
import os
import sys
import threading
import weakref
from typing import Any

from pyspark.sql import SparkSession

from cdc_platform.config.lake import LakeLocation
from cdc_platform.config.platform import SparkConfig
from cdc_platform.config.urls import redact_url
from cdc_platform.errors import SparkSessionError
from cdc_platform.spark.jars import ARTIFACTS, installed_jars
from cdc_platform.spark.storage import export_sail_environment, s3a_conf

__all__ = [
    "CONNECT_MARK",
    "DELTA_SQL_CONF",
    "SESSION_CONF",
    "SparkSessionFactory",
    "classic_builder",
    "connect_builder",
    "embedded_url",
    "stop_embedded_server",
]

logger = logging.getLogger("cdc_platform.spark")

SESSION_CONF: dict[str, str] = {"spark.sql.session.timeZone": "UTC"}
"""Settings every session gets, whatever the mode (the user's `conf` cannot override them)."""

DELTA_SQL_CONF: dict[str, str] = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
}
"""What classic Apache Spark needs for `delta.`path`` tables, MERGE INTO and VERSION AS OF."""

CONNECT_MARK = "SPARK_CONNECT_MODE_ENABLED"
"""Set by PySpark once the process has a Spark Connect session; from then on its
``pyspark.sql.functions`` build Spark Connect columns, which classic Spark cannot run."""


class _EmbeddedServer:
    """The process's one Sail server: started on first use, stopped at exit.

    Sessions made on it by a factory are stopped first: pyspark's Spark Connect client runs
    clean-up calls at exit, which retry for minutes against a server that is already gone
    (measured: the process hangs at exit).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._server: Any = None
        self._url: str | None = None
        self._exit_hook = False
        self._sessions: weakref.WeakSet[SparkSession] = weakref.WeakSet()

    def register(self, session: SparkSession) -> None:
        with self._lock:
            self._sessions.add(session)

    def url(self, host: str, port: int) -> str:
        with self._lock:
            if self._server is not None and self._server.running:
                return self._url or ""
            try:
                from pysail.spark import SparkConnectServer  # noqa: PLC0415 (embedded only)

                server = SparkConnectServer(host, port)
                server.start(background=True)
                address = server.listening_address
            except Exception as exc:  # pysail raises plain RuntimeError/OSError
                raise SparkSessionError(
                    f"the embedded Spark engine (Sail) did not start on {host}:{port}: {exc}"
                ) from exc
            if address is None:
                raise SparkSessionError("the embedded Spark engine (Sail) reports no address")
            self._server = server
            self._url = f"sc://{address[0]}:{address[1]}"
            if not self._exit_hook:
                atexit.register(self.stop)
                self._exit_hook = True
            logger.info("embedded Spark engine (Sail) listening at %s", self._url)
            return self._url

    def stop(self) -> None:
        with self._lock:
            server, self._server, self._url = self._server, None, None
            sessions, self._sessions = list(self._sessions), weakref.WeakSet()
        for session in sessions:
            _stop_session(session)
        if server is not None and server.running:
            server.stop()


def _stop_session(session: SparkSession) -> None:
    try:
        session.stop()
    except Exception as exc:  # the server may be gone already
        logger.debug("stopping a Spark session failed: %s", exc)


def _stopped(session: SparkSession) -> bool:
    """A classic session whose SparkContext was stopped (e.g. by another factory of the same
    process: classic sessions share one context) cannot run anything; it is made again."""
    context = getattr(session, "_sc", None)
    return context is not None and getattr(context, "_jsc", None) is None


def _running_classic_context() -> bool:
    """Whether this process already runs a classic SparkContext."""
    from pyspark import SparkContext  # noqa: PLC0415 (classic mode only)

    context = SparkContext._active_spark_context
    return context is not None and getattr(context, "_jsc", None) is not None


_EMBEDDED = _EmbeddedServer()


def embedded_url(config: SparkConfig | None = None) -> str:
    """The `sc://` URL of this process's Sail server, starting it if needed (thread-safe)."""
    config = config or SparkConfig()
    return _EMBEDDED.url(config.embedded_host, config.embedded_port)


def stop_embedded_server() -> None:
    """Stop this process's Sail server now (it is also stopped at exit); sessions on it die."""
    _EMBEDDED.stop()


def _settings(config: SparkConfig, lake: LakeLocation | None = None) -> dict[str, str]:
    """The lake's S3A settings, then the user's ``conf`` (which may override them), then
    :data:`SESSION_CONF`."""
    storage = s3a_conf(lake) if lake is not None else {}
    return {**storage, **config.conf, **SESSION_CONF}


def connect_builder(
    url: str, config: SparkConfig, lake: LakeLocation | None = None
) -> SparkSession.Builder:
    """A Spark Connect builder for ``url`` with the platform's settings (creates nothing).

    With a ``lake`` on S3 (mode ``connect``) the session gets the ``spark.hadoop.fs.s3a.*``
    settings of :func:`.storage.s3a_conf`.
    """
    if not url.startswith("sc://"):
        raise SparkSessionError(f"a Spark Connect URL starts with sc://, not {redact_url(url)!r}")
    builder = SparkSession.Builder().remote(url)
    for key, value in _settings(config, lake).items():
        builder = builder.config(key, value)
    return builder


def _choose_worker_python(config: SparkConfig) -> None:
    """Set ``PYSPARK_PYTHON`` (unless it is set) for a classic session's Python workers.

    PySpark reads only that variable when its context starts and otherwise runs ``python3``
    from PATH, which fails a local session whenever the platform runs from an interpreter
    not first on PATH (a virtual environment, a Dagster run worker): Spark refuses a worker
    of another minor version (PYTHON_VERSION_MISMATCH), and another interpreter may lack the
    packages. On a ``local`` master the workers run this interpreter; ``spark.pyspark.python``
    in ``conf`` is taken on any master (as spark-submit does); a cluster master without it
    keeps PySpark's default, a path that exists on every node.
    """
    if os.environ.get("PYSPARK_PYTHON"):
        return
    python = config.conf.get("spark.pyspark.python")
    if not python and config.master.startswith("local") and sys.executable:
        python = sys.executable
    if python:
        os.environ["PYSPARK_PYTHON"] = python


def classic_builder(config: SparkConfig, lake: LakeLocation | None = None) -> SparkSession.Builder:
    """A classic PySpark builder with Delta configured; creating it starts no JVM.

    With ``jars: installed`` (the default) the jars ``scripts/setup.sh`` fetched go into
    ``spark.jars`` ahead of any the user's ``conf`` gives (raises SparkSessionError when they
    were never fetched); with ``maven`` Spark resolves :data:`.jars.ARTIFACTS` when the
    session starts. With a ``lake`` on S3 it also has the ``spark.hadoop.fs.s3a.*`` settings
    of :func:`.storage.s3a_conf`. Sets ``PYSPARK_PYTHON`` when it is unset
    (:func:`_choose_worker_python`), as the session reads it when it starts.
    """
    _choose_worker_python(config)
    settings = {**DELTA_SQL_CONF, **_settings(config, lake)}
    if config.jars == "installed":
        given = config.conf.get("spark.jars")
        settings["spark.jars"] = ",".join([*installed_jars(), *([given] if given else [])])
    elif config.jars == "maven":
        settings["spark.jars.packages"] = ",".join(ARTIFACTS)
    builder = SparkSession.Builder().master(config.master).appName(config.app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    return builder


class SparkSessionFactory:
    """Hands out the session of the configured mode; one session per factory, made lazily.

    Thread-safe. ``session()`` is what Dagster resources and benchmarks call; ``builder()``
    exposes the configuration without connecting (tests of the connect and classic modes).
    ``lake`` (``config.lake``) makes the session reach a lake on S3 with its settings.
    """

    def __init__(self, config: SparkConfig | None = None, lake: LakeLocation | None = None) -> None:
        self.config = config or SparkConfig()
        self.lake = lake
        self._lock = threading.Lock()
        self._session: SparkSession | None = None
        self._session_url: str | None = None
        self._borrowed = False

    def builder(self) -> SparkSession.Builder:
        """The session builder of the configured mode (embedded starts the Sail server)."""
        return self._builder(self._url())

    def _url(self) -> str | None:
        config = self.config
        if config.mode == "embedded":
            if self.lake is not None:
                export_sail_environment(self.lake)
            return embedded_url(config)
        if config.mode == "connect":
            if not config.connect_url:
                raise SparkSessionError("spark.mode is connect but spark.connect_url is not set")
            token = config.token()
            if token is None:
                return config.connect_url
            return f"{config.connect_url.rstrip('/')}/;token={token.get_secret_value()}"
        return None

    def _builder(self, url: str | None) -> SparkSession.Builder:
        if url is None:
            return classic_builder(self.config, self.lake)
        if self.config.mode == "embedded":  # Sail reads the AWS environment, not s3a conf
            return connect_builder(url, self.config)
        return connect_builder(url, self.config, self.lake)

    def session(self) -> SparkSession:
        """The session, created on first call; raises SparkSessionError naming the mode.

        In embedded mode a session whose Sail server was stopped is replaced by one on a
        freshly started server.
        """
        with self._lock:
            url = self._url()
            session = self._session
            if session is not None and url == self._session_url and not _stopped(session):
                return session
            if url is None and CONNECT_MARK in os.environ:
                raise SparkSessionError(
                    "spark.mode is classic but this process already runs Spark Connect "
                    "sessions (PySpark then builds Spark Connect columns only): run classic "
                    "Spark in a process of its own"
                )
            builder = self._builder(url)
            # A classic session joins the process's running SparkContext when there is one:
            # it is another factory's to stop, not this one's.
            borrowed = url is None and _running_classic_context()
            try:
                session = builder.getOrCreate() if url is None else builder.create()
                for key, value in SESSION_CONF.items():
                    session.conf.set(key, value)
            except Exception as exc:  # py4j, grpc and pyspark errors have no common base
                # Not chained: the driver's own error may quote the URL with its token.
                raise SparkSessionError(
                    f"no Spark session in mode {self.config.mode!r}: {type(exc).__name__}: "
                    f"{self._redact(str(exc))}{self._hint(builder)}"
                ) from None
            if self.config.mode == "embedded":
                _EMBEDDED.register(session)
            self._session, self._session_url = session, url
            self._borrowed = borrowed
            return session

    def _redact(self, text: str) -> str:
        token = self.config.token() if self.config.mode == "connect" else None
        if token is not None and token.get_secret_value():
            text = text.replace(token.get_secret_value(), "***")
        return redact_url(text)

    def _hint(self, builder: SparkSession.Builder) -> str:
        packages = getattr(builder, "_options", {}).get("spark.jars.packages")
        if self.config.mode != "classic" or not packages:
            return ""
        return (
            f" (spark.jars: maven fetches {packages} from Maven Central when the session "
            "starts; where that is unreachable, run scripts/setup.sh once and use the default "
            "spark.jars: installed)"
        )

    def stop(self) -> None:
        """Stop this factory's session (not the embedded server, which other factories share,
        nor a classic SparkContext that another factory of the process started)."""
        with self._lock:
            session, self._session = self._session, None
            borrowed, self._borrowed = self._borrowed, False
        if session is not None and not borrowed:
            _stop_session(session)
