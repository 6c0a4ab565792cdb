"""A mirror asset whose apply produced no table (the change log holds nothing of it yet)
never reports success: its run fails naming the table and what to do, while the tables that
have mirrors are materialized as usual."""

from datetime import UTC, datetime
from pathlib import Path

import pytest
from dagster import AssetKey, AssetSelection, Definitions, define_asset_job, instance_for_test
from deltalake import DeltaTable

from cdc_platform.config import load_config
from cdc_platform.coordination.table_catalog import Catalog, CatalogColumn, CatalogTable
from cdc_platform.sink.destination_lake import DestinationLake
from cdc_platform.spark.session import SparkSessionFactory
from cdc_platform.testing.spark_changes import ChangeLogWriter, SourceTable, column
from dagster_defs import build_definitions

pytestmark = pytest.mark.integration


def test_a_mirror_without_a_table_is_not_reported_done(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spark_factory: SparkSessionFactory
) -> None:
    monkeypatch.setenv("CDC_SOURCE_PASSWORD", "unused")
    conf = tmp_path / "conf"
    (conf / "destinations" / "shop").mkdir(parents=True)
    (conf / "platform.yaml").write_text(f"lake_root: {tmp_path / 'lake'}\n")
    (conf / "destinations" / "shop" / "instance.yaml").write_text(
        "source: {user: cdc, password_env: CDC_SOURCE_PASSWORD, server_id: 7}\n"
    )
    orders = SourceTable("shop", "orders", [column("id", "bigint", pk=True)])
    now = datetime.now(UTC)
    log = ChangeLogWriter(DestinationLake.of(load_config(conf), "shop").change_log)
    log.commit([orders.insert({"id": 1})], ts=now, committed_at=now)
    known = (CatalogColumn("id", "bigint", nullable=False, primary_key=True),)
    catalog = Catalog(
        "shop",
        (CatalogTable("shop", "orders", known, ("source",)), CatalogTable("shop", "quiet", known)),
    )
    defs = build_definitions(str(conf), catalogs={"shop": catalog})
    orders_key = AssetKey(["cdc", "shop", "orders"])
    quiet_key = AssetKey(["cdc", "shop", "quiet"])
    job = define_asset_job(
        "m", selection=AssetSelection.assets(orders_key, quiet_key).without_checks()
    )
    merged = Definitions.merge(defs, Definitions(jobs=[job]))
    with instance_for_test() as instance:
        result = merged.resolve_job_def("m").execute_in_process(
            instance=instance, raise_on_error=False
        )
        assert not result.success
        materialized = {e.asset_key for e in result.get_asset_materialization_events()}
        assert materialized == {orders_key}
        (failure,) = [e for e in result.all_events if e.is_step_failure]
        message = str(failure.step_failure_data.error)
        assert "no mirror table yet for shop.quiet" in message
        assert instance.get_latest_materialization_event(quiet_key) is None
    mirror = tmp_path / "lake" / "shop" / "mirror" / "shop.orders"
    assert DeltaTable(str(mirror)).to_pyarrow_table().num_rows == 1
