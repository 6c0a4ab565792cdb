"""The embedded engine's life cycle and the connect mode against a real Spark Connect server.

The connect mode is pointed at the embedded Sail server, a real Spark Connect endpoint (and at
an Apache Spark Connect server by the engine-parametrised tests). The classic mode runs Delta
on the jars scripts/setup.sh installed, in a process of its own.
"""

from __future__ import annotations

import os
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


def test_classic_mode_runs_delta_on_the_installed_jars(tmp_path: Path) -> None:
    """Classic mode in a fresh process: delta-spark from the jars scripts/setup.sh fetched,
    nothing resolved at start; a Delta table is written, merged into and read at a version."""
    code = (
        "import sys\n"
        "from cdc_platform.config.models import SparkConfig\n"
        "from cdc_platform.spark.session import SparkSessionFactory\n"
        "conf = {'spark.ui.enabled': 'false', 'spark.sql.shuffle.partitions': '2'}\n"
        "s = SparkSessionFactory(SparkConfig(mode='classic', master='local[1]', conf=conf))"
        ".session()\n"
        "assert 'spark.jars.packages' not in dict(s.sparkContext.getConf().getAll())\n"
        "p = sys.argv[1]\n"
        "s.range(3).write.format('delta').save(p)\n"
        "s.sql(f'MERGE INTO delta.`{p}` t USING (SELECT 7 AS id) u ON t.id = u.id '\n"
        "      'WHEN NOT MATCHED THEN INSERT *')\n"
        "now = s.read.format('delta').load(p).count()\n"
        "then = s.sql(f'SELECT * FROM delta.`{p}` VERSION AS OF 0').count()\n"
        "print('DELTA', now, then, flush=True)\n"
    )
    marks = ("SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE", "SPARK_LOCAL_REMOTE")
    env = {k: v for k, v in os.environ.items() if k not in marks}
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "t")],
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "DELTA 4 3" in done.stdout, done.stderr[-3000:]
