"""Session configuration of the three modes, built without starting any engine.

The engines run for real in tests/integration/test_spark_session.py and in the
engine-parametrised integration tests.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from cdc_platform.config.lake import LakeLocation
from cdc_platform.config.platform import PlatformConfig, SparkConfig
from cdc_platform.errors import SparkSessionError
from cdc_platform.spark.jars import manifest_path
from cdc_platform.spark.session import (
    CONNECT_MARK,
    DELTA_SQL_CONF,
    SparkSessionFactory,
    classic_builder,
    connect_builder,
)
from cdc_platform.spark.storage import S3A_FILESYSTEM, s3a_conf, sail_environment
from cdc_platform.testing.library_internals import builder_options

pytestmark = pytest.mark.unit


@pytest.fixture(autouse=True)
def _no_worker_python(monkeypatch: pytest.MonkeyPatch) -> None:
    """Start without ``PYSPARK_PYTHON`` and undo the one a classic builder sets (recorded
    here by setting it first), so that no test leaves it to the rest of the process."""
    monkeypatch.setenv("PYSPARK_PYTHON", "")
    monkeypatch.delenv("PYSPARK_PYTHON")


def _installed(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[str]:
    """A fake installed jar set: a manifest in a private cache naming existing files."""
    monkeypatch.setenv("CDC_PLATFORM_CACHE", str(tmp_path / "cache"))
    jars = [tmp_path / "delta-spark.jar", tmp_path / "hadoop-aws.jar"]
    for jar in jars:
        jar.write_bytes(b"")
    manifest = manifest_path()
    manifest.parent.mkdir(parents=True)
    manifest.write_text("".join(f"{j}\n" for j in jars))
    return [str(j) for j in jars]


def test_classic_builder_has_delta_the_installed_jars_and_utc(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    jars = _installed(monkeypatch, tmp_path)
    config = SparkConfig(
        mode="classic",
        master="local[2]",
        conf={"spark.sql.shuffle.partitions": "4", "spark.jars": "/opt/extra.jar"},
    )
    options = builder_options(classic_builder(config))
    assert options["spark.master"] == "local[2]"
    assert options["spark.app.name"] == "cdc-platform"
    for key, value in DELTA_SQL_CONF.items():
        assert options[key] == value
    assert options["spark.jars"] == ",".join([*jars, "/opt/extra.jar"])
    assert "spark.jars.packages" not in options, "nothing is resolved when a session starts"
    assert options["spark.sql.session.timeZone"] == "UTC"
    assert options["spark.sql.shuffle.partitions"] == "4"


def test_classic_without_installed_jars_says_to_run_setup(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("CDC_PLATFORM_CACHE", str(tmp_path / "empty"))
    with pytest.raises(SparkSessionError, match=r"not installed.*scripts/setup\.sh"):
        SparkSessionFactory(SparkConfig(mode="classic")).builder()


def test_classic_builder_with_maven_or_provided_jars() -> None:
    maven = builder_options(classic_builder(SparkConfig(mode="classic", jars="maven")))
    assert (
        maven["spark.jars.packages"]
        == "io.delta:delta-spark_4.2_2.13:4.4.0,org.apache.hadoop:hadoop-aws:3.5.0"
    )
    config = SparkConfig(
        mode="classic", jars="provided", conf={"spark.jars": "/opt/delta/delta-spark.jar"}
    )
    options = builder_options(SparkSessionFactory(config).builder())
    assert "spark.jars.packages" not in options
    assert options["spark.jars"] == "/opt/delta/delta-spark.jar"
    assert options["spark.sql.extensions"] == DELTA_SQL_CONF["spark.sql.extensions"]


def test_classic_is_refused_in_a_process_that_went_spark_connect(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(CONNECT_MARK, "1")
    factory = SparkSessionFactory(SparkConfig(mode="classic", jars="provided"))
    with pytest.raises(SparkSessionError, match="process of its own"):
        factory.session()


def test_connect_builder_and_settings_that_cannot_be_overridden() -> None:
    config = SparkConfig(
        mode="connect",
        connect_url="sc://spark.example:15002",
        conf={"spark.sql.session.timeZone": "Europe/Paris", "spark.x": "1"},
    )
    options = builder_options(SparkSessionFactory(config).builder())
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
    assert (spark.jars, spark.conf, spark.embedded_port) == ("installed", {}, 0)
    parsed = PlatformConfig.model_validate({"spark": {"mode": "classic", "jars": "provided"}})
    assert parsed.spark.mode == "classic"
    assert parsed.spark.jars == "provided"


def _s3_lake(options: dict[str, str] | None = None) -> LakeLocation:
    return LakeLocation.resolve("s3://lake/prefix", Path("/unused"), options, environ={})


def test_connect_and_classic_get_the_lakes_s3a_settings_without_secrets(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The endpoint, region and path style come from the lake settings (the options win over
    the environment); credentials stay with the AWS provider chain."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:8333")
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s3cr3t-value")
    lake = _s3_lake({"aws_region": "eu-west-3"})
    config = SparkConfig(
        mode="connect",
        connect_url="sc://spark.example:15002",
        conf={"spark.hadoop.fs.s3a.path.style.access": "false"},
    )
    options = builder_options(SparkSessionFactory(config, lake).builder())
    assert options["spark.hadoop.fs.s3.impl"] == S3A_FILESYSTEM
    assert options["spark.hadoop.fs.s3a.endpoint"] == "http://127.0.0.1:8333"
    assert options["spark.hadoop.fs.s3a.connection.ssl.enabled"] == "false"
    assert options["spark.hadoop.fs.s3a.endpoint.region"] == "eu-west-3"
    assert options["spark.hadoop.fs.s3a.path.style.access"] == "false"  # the user's conf wins
    classic = builder_options(classic_builder(SparkConfig(mode="classic", jars="provided"), lake))
    assert classic["spark.hadoop.fs.s3a.path.style.access"] == "true"
    assert classic["spark.hadoop.fs.s3a.endpoint.region"] == "eu-west-3"
    for built in (options, classic):
        assert not any("s3cr3t" in v for v in built.values())
        assert not any("secret" in k or "access.key" in k for k in built)
    local = LakeLocation.resolve("/data/lake", Path("/"))
    assert s3a_conf(local) == {}
    assert "spark.hadoop.fs.s3.impl" not in builder_options(
        SparkSessionFactory(config, local).builder()
    )


def test_embedded_mode_takes_the_lake_overrides_through_the_environment() -> None:
    """Sail has no S3 conf: lake_storage_options' non-secret overrides become AWS variables."""
    lake = _s3_lake({"endpoint": "https://store.example", "aws_allow_http": "false"})
    assert sail_environment(lake) == {
        "AWS_ENDPOINT_URL": "https://store.example",
        "AWS_ALLOW_HTTP": "false",
    }
    assert sail_environment(_s3_lake()) == {}
    assert s3a_conf(lake, environ={})["spark.hadoop.fs.s3a.connection.ssl.enabled"] == "true"


def _classic(master: str, python: str | None = None) -> SparkConfig:
    conf = {"spark.pyspark.python": python} if python else {}
    return SparkConfig(mode="classic", master=master, conf=conf)


OPT_PYTHON = "/opt/py/bin/python"


@pytest.mark.parametrize(
    ("config", "preset", "chosen"),
    [
        (_classic("local[2]"), None, sys.executable),
        (_classic("local"), None, sys.executable),
        (_classic("local[2]", OPT_PYTHON), None, OPT_PYTHON),
        (_classic("yarn", OPT_PYTHON), None, OPT_PYTHON),
        (_classic("yarn"), None, None),
        (_classic("spark://head:7077"), None, None),
        (_classic("local[2]"), "/usr/bin/python3.11", "/usr/bin/python3.11"),
    ],
)  # fmt: skip
def test_classic_python_workers_run_this_interpreter_on_a_local_master(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    config: SparkConfig,
    preset: str | None,
    chosen: str | None,
) -> None:
    """PySpark's workers run ``PYSPARK_PYTHON``, else ``python3`` from PATH (another minor
    version fails every Python worker): a local master gets this interpreter, the user's
    ``spark.pyspark.python`` is taken anywhere, a cluster keeps the default, a set variable
    is kept."""
    _installed(monkeypatch, tmp_path)
    if preset is not None:
        monkeypatch.setenv("PYSPARK_PYTHON", preset)
    classic_builder(config)
    assert os.environ.get("PYSPARK_PYTHON") == chosen
