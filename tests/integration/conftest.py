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
    stopped the server, in which case a new server and session are made)."""
    return spark_factory.session()
