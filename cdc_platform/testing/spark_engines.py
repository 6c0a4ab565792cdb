"""The Spark engines a test can run on: one name per ``spark.mode``, and what a test gets."""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import SparkSession

from cdc_platform.config.platform import SparkConfig
from cdc_platform.spark.session import SparkSessionFactory

__all__ = ["ENGINES", "SparkEngine"]

ENGINES = ("embedded", "classic", "connect")
"""Sail in the process, classic Apache Spark with delta-spark, an Apache Spark Connect server:
``@pytest.mark.parametrize("spark_engine", ENGINES, indirect=True)``."""


@dataclass(frozen=True)
class SparkEngine:
    """One engine under test: its name (= ``spark.mode``), configuration and session."""

    name: str
    config: SparkConfig
    factory: SparkSessionFactory

    @property
    def spark(self) -> SparkSession:
        """The engine's session (made on first use, then the same)."""
        return self.factory.session()
