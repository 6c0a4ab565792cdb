"""The embedded engine's life cycle and the connect mode against a real Spark Connect server.

The connect mode is pointed at the embedded Sail server, a real Spark Connect endpoint (and at
an Apache Spark Connect server by the engine-parametrised tests). The classic mode runs Delta
on the jars scripts/setup.sh installed, in the test worker's classic JVM.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from cdc_platform.config.platform import SparkConfig
from cdc_platform.spark.jars import installed_jars
from cdc_platform.spark.session import SparkSessionFactory, embedded_url, stop_embedded_server
from cdc_platform.testing.spark_engines import SparkEngine

pytestmark = pytest.mark.integration


def test_embedded_server_is_one_per_process_and_restarts_after_stop(
    spark_factory: SparkSessionFactory,
) -> None:
    urls: list[str] = []
    threads = [threading.Thread(target=lambda: urls.append(embedded_url())) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(urls)) == 1, "every thread gets the same server"
    first = spark_factory.session()
    assert spark_factory.session() is first
    assert first.range(3).count() == 3
    stop_embedded_server()
    second = spark_factory.session()
    assert second is not first, "a stopped server is replaced, with a new session"
    assert second.range(2).count() == 2
    assert first.client.is_closed, "sessions on the stopped server were closed, not orphaned"


def test_connect_mode_reads_and_writes_delta(
    spark_factory: SparkSessionFactory, tmp_path: Path
) -> None:
    spark_factory.session()
    factory = SparkSessionFactory(SparkConfig(mode="connect", connect_url=embedded_url()))
    session = factory.session()
    assert session.conf.get("spark.sql.session.timeZone") == "UTC"
    path = str(tmp_path / "t")
    session.createDataFrame([(1, "a")], "id int, v string").write.format("delta").save(path)
    assert session.read.format("delta").load(path).collect()[0]["v"] == "a"
    factory.stop()


def test_embedded_server_stops_cleanly_at_exit() -> None:
    code = (
        "from cdc_platform.spark.session import SparkSessionFactory\n"
        "s = SparkSessionFactory().session()\n"
        "assert s.range(5).count() == 5\n"
        "print('done', flush=True)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "done" in done.stdout
    assert "The Spark Connect server has stopped" in done.stderr


@pytest.mark.parametrize("spark_engine", ["classic"], indirect=True)
def test_classic_mode_runs_delta_on_the_installed_jars(
    spark_engine: SparkEngine, tmp_path: Path
) -> None:
    """Classic mode as the engine starts it (the test worker's own JVM): delta-spark from the
    jars scripts/setup.sh fetched, nothing resolved at start; a Delta table is written,
    merged into and read at a version. Its Python workers run the interpreter the session
    chose, not ``python3`` from PATH (the test command does not put .venv/bin on PATH)."""
    s = spark_engine.spark
    assert s.sparkContext.pythonExec == os.environ.get("PYSPARK_PYTHON"), "set before it started"
    assert s.createDataFrame([(1, "a")], "id int, v string").collect() == [(1, "a")]
    settings = dict(s.sparkContext.getConf().getAll())
    assert "spark.jars.packages" not in settings, "nothing is resolved when a session starts"
    listed = set(settings["spark.jars"].split(","))
    assert {Path(j).name for j in installed_jars()} <= {Path(j).name for j in listed}
    p = str(tmp_path / "t")
    s.range(3).write.format("delta").save(p)
    s.sql(f"MERGE INTO delta.`{p}` t USING (SELECT 7 AS id) u ON t.id = u.id "
          "WHEN NOT MATCHED THEN INSERT *")  # fmt: skip
    assert s.read.format("delta").load(p).count() == 4
    assert s.sql(f"SELECT * FROM delta.`{p}` VERSION AS OF 0").count() == 3


@pytest.mark.parametrize("spark_engine", ["classic"], indirect=True)
def test_a_factory_that_joined_the_running_context_leaves_it_running(
    spark_engine: SparkEngine,
) -> None:
    """Classic sessions of one process share its SparkContext: a second factory (a Dagster
    resource executed in-process beside another) gets the running one, and its stop must not
    stop the context under the first factory's feet."""
    first = spark_engine.spark
    second = SparkSessionFactory(spark_engine.config)
    joined = second.session()
    assert joined.sparkContext is first.sparkContext
    second.stop()
    assert first.range(3).count() == 3, "the first factory's session still runs"
    assert spark_engine.factory.session() is first
