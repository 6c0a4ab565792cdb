"""Session configuration of the three modes, built without starting any engine.

The classic mode cannot start here: its delta-spark jars come from Maven Central, which these
machines cannot reach, so only the builder's configuration is checked. The connect
mode runs for real against the embedded engine in tests/integration/test_spark_session.py.
"""

from __future__ import annotations

import pytest

from cdc_platform.config.models import PlatformConfig, SparkConfig
from cdc_platform.errors import SparkSessionError
from cdc_platform.spark.session import (
    DELTA_SQL_CONF,
    SparkSessionFactory,
    classic_builder,
    connect_builder,
)

pytestmark = pytest.mark.unit


def test_classic_builder_has_delta_and_utc() -> None:
    config = SparkConfig(
        mode="classic", master="local[2]", conf={"spark.sql.shuffle.partitions": "4"}
    )
    options = classic_builder(config)._options
    assert options["spark.master"] == "local[2]"
    assert options["spark.app.name"] == "cdc-platform"
    for key, value in DELTA_SQL_CONF.items():
        assert options[key] == value
    assert options["spark.jars.packages"].startswith("io.delta:delta-spark_")
    assert options["spark.jars.packages"].endswith(":4.4.1")
    assert options["spark.sql.session.timeZone"] == "UTC"
    assert options["spark.sql.shuffle.partitions"] == "4"


def test_classic_builder_without_maven_uses_given_jars() -> None:
    config = SparkConfig(
        mode="classic", delta_pip=False, conf={"spark.jars": "/opt/delta/delta-spark.jar"}
    )
    options = SparkSessionFactory(config).builder()._options
    assert "spark.jars.packages" not in options
    assert options["spark.jars"] == "/opt/delta/delta-spark.jar"
    assert options["spark.sql.extensions"] == DELTA_SQL_CONF["spark.sql.extensions"]


def test_connect_builder_and_settings_that_cannot_be_overridden() -> None:
    config = SparkConfig(
        mode="connect",
        connect_url="sc://spark.example:15002",
        conf={"spark.sql.session.timeZone": "Europe/Paris", "spark.x": "1"},
    )
    options = SparkSessionFactory(config).builder()._options
    assert options == {
        "spark.remote": "sc://spark.example:15002",
        "spark.x": "1",
        "spark.sql.session.timeZone": "UTC",
    }
    with pytest.raises(SparkSessionError, match="connect_url is not set"):
        SparkSessionFactory(SparkConfig(mode="connect")).builder()
    with pytest.raises(SparkSessionError, match="sc://"):
        connect_builder("http://spark:15002", config)


def test_platform_defaults_stay_backward_compatible() -> None:
    spark = PlatformConfig().spark
    assert (spark.mode, spark.connect_url, spark.master) == ("embedded", None, "local[2]")
    assert (spark.delta_pip, spark.conf, spark.embedded_port) == (True, {}, 0)
    parsed = PlatformConfig.model_validate({"spark": {"mode": "classic", "delta_pip": False}})
    assert parsed.spark.mode == "classic"
    assert not parsed.spark.delta_pip
