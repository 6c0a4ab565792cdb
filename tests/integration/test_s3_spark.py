"""Spark mirrors, daily history and reconciliation with the lake on S3 (a private SeaweedFS).

Only the standard AWS environment variables point the platform and the embedded engine
(Sail) at the server (the `s3_lake` fixture sets them); the config holds nothing but
``lake_root: s3://...``. Real MariaDB binlog, real Delta tables on the object store.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from datetime import UTC, datetime
from pathlib import Path

import pytest
from dagster import AssetKey, instance_for_test
from pyspark.sql import SparkSession

from cdc_platform.backfill.request_inbox import repair_inbox
from cdc_platform.config import ConfigSet, load_config
from cdc_platform.reconcile.service import reconcile_destination
from cdc_platform.runtime import DestinationRuntime
from cdc_platform.runtime.supervised import supervised_destination
from cdc_platform.sink.destination_lake import DestinationLake
from cdc_platform.sink.lake_files import join_uri
from cdc_platform.sink.term import WriteTerm
from cdc_platform.spark import staging
from cdc_platform.spark.history import mirror_as_of
from cdc_platform.spark.locations import (
    STAGING_DIR,
    mirror_root,
    mirror_tables,
    mirror_uri,
    table_exists,
)
from cdc_platform.spark.mirror import apply_changes
from cdc_platform.spark.names import location_name
from cdc_platform.spark.target import MirrorTarget
from cdc_platform.testing.destinations import PASSWORD_ENV, sqlite_lease, write_conf
from cdc_platform.testing.workload import Workload, source_rows
from dagster_defs import build_definitions
from tests.conftest import MariaDBDatabase, S3Lake
from tests.integration.test_spark_assets import run_assets
from tests.integration.test_spark_pipeline import assert_mirror_equals_source

pytestmark = pytest.mark.integration


@pytest.fixture
def s3_destination(
    mariadb: MariaDBDatabase, s3_lake: S3Lake, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> ConfigSet:
    """Destination `d` over the test database with ``lake_root: s3://...``; start pinned."""
    monkeypatch.setenv(PASSWORD_ENV, mariadb.user.password)
    conf = tmp_path / "conf"
    write_conf(
        conf,
        destination="d",
        server=mariadb.server,
        user=mariadb.user,
        database=mariadb.name,
        lake_root=s3_lake.uri,
        server_id=3301,
        extra_platform=sqlite_lease(
            tmp_path, renew_interval_seconds=0.2, expiry_seconds=1.5, single_machine=True
        ),
    )
    config = load_config(conf)
    assert not config.errors, config.errors
    assert config.lake.is_remote
    catch_up(config)  # pins the start position
    return config


def catch_up(config: ConfigSet) -> None:
    """Stream until idle: everything the source committed so far is in the change log."""
    term = WriteTerm.in_lake("d", config.destinations["d"].config, config.lake)
    summary = DestinationRuntime(term).run(exit_when_idle_seconds=1.5)
    assert summary.error is None, summary


def test_mirrors_and_history_on_s3_equal_the_source(
    spark: SparkSession,
    s3_destination: ConfigSet,
    mariadb: MariaDBDatabase,
    s3_lake: S3Lake,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config, name = s3_destination, mariadb.name
    lake = config.lake
    options = lake.storage_options
    uri = DestinationLake.of(config, "d").change_log
    root = mirror_root(lake.uri, "d")
    assert root == f"{s3_lake.uri}/d/mirror"
    workload = Workload(mariadb.server, name, seed=11)
    workload.create_schema()
    workload.run_transactions(80)
    catch_up(config)

    tables = sorted(t for d, t in mirror_tables(spark, uri, options) if d == name)
    assert tables == ["customers", "orders"]
    for table in tables:
        result = apply_changes(spark, MirrorTarget(uri, root, name, table, storage_options=options))
        assert result.mode == "rebuild"
        assert result.mirror_version == 0  # delta-rs read the version on S3
        assert_mirror_equals_source(spark, mariadb, root, table)
        assert table_exists(spark, mirror_uri(root, name, table), options)

    # what an apply interrupted before removing its staging table leaves behind
    leftover = join_uri(root, STAGING_DIR, location_name(name, "orders"), "leftover")
    spark.createDataFrame([(1,)], "x int").write.format("delta").save(leftover)
    workload.run_transactions(60)
    catch_up(config)
    for table in tables:
        result = apply_changes(spark, MirrorTarget(uri, root, name, table, storage_options=options))
        assert result.mode == "merge", "an increment is merged on S3 too"
        assert_mirror_equals_source(spark, mariadb, root, table)
        again = apply_changes(spark, MirrorTarget(uri, root, name, table, storage_options=options))
        assert again.mode == "noop"

    keys = s3_lake.keys()
    assert any(f"/d/mirror/_cdc_state/{name}.customers/_delta_log/" in k for k in keys)
    staged = {k.split("/_cdc_staging/")[1].split("/")[1] for k in keys if "/_cdc_staging/" in k}
    assert staged == {"leftover"}, "each merge removed its staging; a fresh leftover stays"
    monkeypatch.setattr(staging, "STALE_STAGING_SECONDS", -60)  # every leftover is stale now
    workload.run_transactions(10)
    catch_up(config)
    assert (
        apply_changes(spark, MirrorTarget(uri, root, name, "orders", storage_options=options)).mode
        == "merge"
    )
    keys = s3_lake.keys()
    assert not [k for k in keys if "/_cdc_staging/" in k], "stale staging removed from S3"

    day = datetime.now(UTC).date()
    history = lake.join("d", "history", day.isoformat())
    for table in tables:
        target = mirror_uri(history, name, table)
        result = mirror_as_of(
            spark, MirrorTarget(uri, root, name, table, storage_options=options), day, target
        )
        assert result.mirror_rows == len(source_rows(mariadb.server, name, table))
        assert result.mirror_version is not None
    objects = s3_lake.keys()
    assert any(f"/d/history/{day.isoformat()}/{name}.orders/_delta_log/" in k for k in objects)
    work = config.conf_dir.parent
    assert not list(work.glob("**/s3:*")), "s3:// must not become a local directory"


def test_reconcile_on_s3_finds_and_repairs_a_damaged_mirror_row(
    spark: SparkSession, s3_destination: ConfigSet, mariadb: MariaDBDatabase, s3_lake: S3Lake
) -> None:
    config, name = s3_destination, mariadb.name
    options = config.lake.storage_options
    mariadb.server.execute(
        "CREATE TABLE items (id INT PRIMARY KEY, name VARCHAR(40), qty INT)",
        "INSERT INTO items VALUES "
        + ", ".join(f"({i}, 'item {i}', {i % 7})" for i in range(1, 301)),
        database=name,
    )
    catch_up(config)
    uri = DestinationLake.of(config, "d").change_log
    root = mirror_root(config.lake.uri, "d")
    apply_changes(spark, MirrorTarget(uri, root, name, "items", storage_options=options))
    clean = reconcile_destination(config, "d", spark)
    assert clean.status == "clean", clean.metadata()

    spark.sql(f"DELETE FROM delta.`{mirror_uri(root, name, 'items')}` WHERE id = 7").collect()
    mariadb.server.execute(
        "SET sql_log_bin = 0",
        "UPDATE items SET name = 'changed quietly' WHERE id = 11",
        database=name,
    )
    report = reconcile_destination(config, "d", spark)
    assert report.status == "repaired", report.metadata()
    items = next(t for t in report.tables if t.table == "items")
    assert (items.missing_in_mirror, items.changed, items.extra_in_mirror) == (1, 1, 0)
    objects = s3_lake.keys()
    assert not [k for k in objects if "/_cdc_staging/" in k], "comparison staging removed"

    apply_changes(spark, MirrorTarget(uri, root, name, "items", storage_options=options))
    assert_mirror_equals_source(spark, mariadb, root, "items")
    again = reconcile_destination(config, "d", spark)
    assert again.status == "clean", again.metadata()

    # `cdc-platform reconcile` in its own process: only the AWS environment points it at S3
    spark.sql(f"DELETE FROM delta.`{mirror_uri(root, name, 'items')}` WHERE id = 20").collect()
    command = [
        sys.executable,
        "-m",
        "cdc_platform.cli",
        "reconcile",
        "--conf",
        str(config.conf_dir),
        "--destination",
        "d",
        "--json",
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    cli = json.loads(done.stdout)
    assert cli["status"] == "repaired", cli
    assert cli["missing_in_mirror"] == 1
    apply_changes(spark, MirrorTarget(uri, root, name, "items", storage_options=options))
    assert_mirror_equals_source(spark, mariadb, root, "items")


def test_dagster_mirror_and_history_assets_on_s3(
    spark: SparkSession, s3_destination: ConfigSet, mariadb: MariaDBDatabase, s3_lake: S3Lake
) -> None:
    """The Dagster assets, with only ``lake_root: s3://...`` in the config: the per-table
    mirrors and today's history partition are written to the bucket and equal the source."""
    config, name = s3_destination, mariadb.name
    workload = Workload(mariadb.server, name, seed=17)
    workload.create_schema()
    workload.run_transactions(40)
    catch_up(config)
    defs = build_definitions(str(config.conf_dir))  # tables: the source's and the log's on S3
    keys = [AssetKey(["cdc", "d", name, table]) for table in ("customers", "orders")]
    with instance_for_test() as instance:
        mirrors = run_assets(defs, keys, instance)
        history = run_assets(
            defs,
            [
                AssetKey(["cdc", "d", name, f"{table}_daily_history"])
                for table in ("customers", "orders")
            ],
            instance,
            partition_key=datetime.now(UTC).date().isoformat(),
        )
    assert mirrors.success
    events = {e.asset_key: e.materialization for e in mirrors.get_asset_materialization_events()}
    assert set(events) == set(keys)
    for key in keys:
        uri = events[key].metadata["dagster/uri"].value
        assert uri == f"{s3_lake.uri}/d/mirror/{name}.{key.path[-1]}"
    root = mirror_root(config.lake.uri, "d")
    for table in ("customers", "orders"):
        assert_mirror_equals_source(spark, mariadb, root, table)

    today = datetime.now(UTC).date().isoformat()
    assert history.success
    days = {
        e.asset_key.path[-1].removesuffix("_daily_history"): e.materialization
        for e in history.get_asset_materialization_events()
    }
    for table in ("customers", "orders"):
        metadata = days[table].metadata
        assert metadata["dagster/uri"].value == f"{s3_lake.uri}/d/history/{today}/{name}.{table}"
        assert metadata["as_of_rows"].value == len(source_rows(mariadb.server, name, table))
    objects = s3_lake.keys()
    assert any(f"/d/history/{today}/{name}.orders/_delta_log/" in k for k in objects)


def test_reconcile_on_s3_sends_the_repair_to_the_streaming_lease_holder(
    spark: SparkSession, s3_destination: ConfigSet, mariadb: MariaDBDatabase
) -> None:
    """While the destination streams, the suspected keys go through the inbox on S3 and the
    lease holder writes the repair."""
    config, name = s3_destination, mariadb.name
    options = config.lake.storage_options
    mariadb.server.execute(
        "CREATE TABLE items (id INT PRIMARY KEY, name VARCHAR(40))",
        "INSERT INTO items VALUES " + ", ".join(f"({i}, 'item {i}')" for i in range(1, 101)),
        database=name,
    )
    catch_up(config)
    uri = DestinationLake.of(config, "d").change_log
    root = mirror_root(config.lake.uri, "d")
    apply_changes(spark, MirrorTarget(uri, root, name, "items", storage_options=options))
    spark.sql(f"DELETE FROM delta.`{mirror_uri(root, name, 'items')}` WHERE id = 5").collect()
    with supervised_destination(config, config.destinations["d"]) as supervisor:
        thread = threading.Thread(target=supervisor.run, daemon=True)
        thread.start()
        try:
            report = reconcile_destination(
                config,
                "d",
                spark,
                settings=config.platform.reconcile.model_copy(update={"wait_seconds": 60}),
            )
        finally:
            supervisor.request_stop("test over")
            thread.join(timeout=30)
        assert not thread.is_alive()
        assert supervisor.repairs == 1
    assert report.status == "repaired", report.metadata()
    assert "lease holder" in (report.repaired_by or "")
    inbox = repair_inbox(DestinationLake.of(config, "d"), config.destinations["d"].config.source)
    assert not inbox.requests.list(".json"), "the request was taken from the inbox on S3"
    apply_changes(spark, MirrorTarget(uri, root, name, "items", storage_options=options))
    assert_mirror_equals_source(spark, mariadb, root, "items")


SAIL_FROM_OPTIONS = """
import sys
from pathlib import Path
from cdc_platform.config import load_config
from cdc_platform.spark.session import SparkSessionFactory
config = load_config(Path(sys.argv[1]))
factory = SparkSessionFactory(config.platform.spark, config.lake)
spark = factory.session()
uri = config.lake.join("sail-probe")
spark.createDataFrame([(1, "a"), (2, "b")], "id int, v string").write.format("delta").save(uri)
print(spark.read.format("delta").load(uri).count())
factory.stop()
"""


def test_embedded_engine_takes_the_endpoint_from_lake_storage_options(
    s3_lake: S3Lake, tmp_path: Path
) -> None:
    """A process whose environment has only the credentials: the endpoint, region and
    allow-http given in ``lake_storage_options`` reach Sail, which writes to the bucket."""
    conf = tmp_path / "conf"
    conf.mkdir()
    env = s3_lake.server.environment()
    (conf / "platform.yaml").write_text(
        f"lake_root: {s3_lake.uri}\n"
        "lake_storage_options:\n"
        f"  aws_endpoint_url: {env['AWS_ENDPOINT_URL']}\n"
        f"  aws_region: {env['AWS_REGION']}\n"
        "  aws_allow_http: 'true'\n"
    )
    child = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    child["AWS_ACCESS_KEY_ID"] = env["AWS_ACCESS_KEY_ID"]
    child["AWS_SECRET_ACCESS_KEY"] = env["AWS_SECRET_ACCESS_KEY"]
    done = subprocess.run(
        [sys.executable, "-c", SAIL_FROM_OPTIONS, str(conf)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=child,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "2"
    assert any("/sail-probe/_delta_log/" in k for k in s3_lake.keys())  # noqa: SIM118 (S3Lake.keys() lists the bucket, it is not a dict)
