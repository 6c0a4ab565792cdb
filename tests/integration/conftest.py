"""Fixtures shared by the integration tests: one embedded Spark engine (Sail) per session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from cdc_platform.config.models import SparkConfig
from cdc_platform.spark.session import SparkSessionFactory, stop_embedded_server


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
def spark(spark_factory: SparkSessionFactory) -> SparkSession:
    """A Spark Connect session on the embedded Sail server (the same one unless a test
    stopped the server, in which case a new server and session are made).

    Sail ends a session idle for 15 minutes (its ``spark.session_timeout_secs``); in a
    parallel run a worker may go that long between Spark tests, so a session the server no
    longer knows is replaced."""
    session = spark_factory.session()
    try:
        session.range(1).collect()
    except Exception:  # pyspark's Connect errors have no common base with grpc's
        spark_factory.stop()
        session = spark_factory.session()
    return session
