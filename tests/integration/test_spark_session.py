"""The embedded engine's life cycle and the connect mode against a real Spark Connect server.

The connect mode is pointed at the embedded Sail server, a real Spark Connect endpoint. The
classic mode needs delta-spark's jars from Maven Central, unreachable here: its configuration
is checked in tests/unit/test_spark_session.py, and a start is shown to fail clearly.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pytest

from cdc_platform.config.models import SparkConfig
from cdc_platform.spark.session import SparkSessionFactory, embedded_url, stop_embedded_server

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
