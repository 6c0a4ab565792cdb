"""The Dagster Spark assets: three daily partitions and the per-table mirrors, for real."""

import json
import os
import random
import subprocess
import sys
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pytest
from dagster import (
    AssetExecutionContext,
    AssetKey,
    AssetSelection,
    DagsterInstance,
    Definitions,
    EventLogRecord,
    ExecuteInProcessResult,
    FreshnessPolicy,
    MaterializeResult,
    asset,
    define_asset_job,
    instance_for_test,
)
from deltalake import DeltaTable

from cdc_platform.config import load_config
from cdc_platform.sink.destination_lake import DestinationLake
from cdc_platform.spark.session import SparkSessionFactory
from cdc_platform.testing.processes import die_with_parent, stop_process_group, wait_for
from cdc_platform.testing.spark_changes import ChangeLogWriter, SourceTable, column
from cdc_platform.testing.spark_engines import ENGINES, SparkEngine
from dagster_defs import build_definitions
from dagster_defs.resources import SparkResource

pytestmark = pytest.mark.integration

DAYS = [date(2026, 3, 1), date(2026, 3, 2), date(2026, 3, 3)]
PROJECT = Path(__file__).resolve().parents[2]


def run_assets(
    defs: Definitions,
    keys: list[AssetKey],
    instance: DagsterInstance,
    partition_key: str | None = None,
) -> ExecuteInProcessResult:
    """Materialize ``keys`` of the code location in-process (their checks left out)."""
    job = define_asset_job("materialize", selection=AssetSelection.assets(*keys).without_checks())
    merged = Definitions.merge(defs, Definitions(jobs=[job]))
    return merged.resolve_job_def("materialize").execute_in_process(
        instance=instance, partition_key=partition_key
    )


@pytest.mark.parametrize("spark_engine", ENGINES, indirect=True)
def test_mirror_asset_materializes_on_each_engine(
    spark_engine: SparkEngine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The per-table mirror asset on Sail, classic Apache Spark and an Apache Spark Connect
    server, chosen by `spark:` in platform.yaml alone."""
    monkeypatch.setenv("CDC_SOURCE_PASSWORD", "unused")
    conf = tmp_path / "conf"
    (conf / "destinations" / "shop").mkdir(parents=True)
    spark_yaml = json.dumps(spark_engine.config.model_dump(exclude_defaults=True))
    (conf / "platform.yaml").write_text(f"lake_root: {tmp_path / 'lake'}\nspark: {spark_yaml}\n")
    (conf / "destinations" / "shop" / "instance.yaml").write_text(
        "source: {user: cdc, password_env: CDC_SOURCE_PASSWORD, server_id: 7}\n"
    )
    configset = load_config(conf)
    assert configset.platform.spark.mode == spark_engine.name
    orders = SourceTable(
        "shop", "orders", [column("id", "bigint", pk=True), column("status", "varchar", length=16)]
    )
    log = ChangeLogWriter(DestinationLake.of(configset, "shop").change_log)
    now = datetime.now(UTC)
    log.commit(
        [orders.insert({"id": i, "status": "new"}) for i in range(1, 6)], ts=now, committed_at=now
    )
    log.commit(
        [orders.update((2,), status="paid"), orders.update((3,), id=30), orders.delete((4,))],
        ts=now,
        committed_at=now,
    )
    key = AssetKey(["cdc", "shop", "orders"])
    with instance_for_test() as instance:
        result = run_assets(build_definitions(str(conf)), [key], instance)
        assert result.success
        (event,) = result.get_asset_materialization_events()
        assert event.materialization.metadata["dagster/row_count"].value == len(orders.rows)
    mirror = DeltaTable(str(tmp_path / "lake" / "shop" / "mirror" / "shop.orders"))
    rows = {r["id"]: r["status"] for r in mirror.to_pyarrow_table().to_pylist()}
    assert rows == {k[0]: row["status"] for k, row in orders.rows.items()}


def test_daily_partitions_and_mirrors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spark_factory: SparkSessionFactory
) -> None:
    """History partitions, then one mirror per table, from a code location whose source is
    down (the tables are read from the change log)."""
    monkeypatch.setenv("CDC_SOURCE_PASSWORD", "unused")
    conf = tmp_path / "conf"
    (conf / "destinations" / "shop").mkdir(parents=True)
    (conf / "platform.yaml").write_text(
        f"lake_root: {tmp_path / 'lake'}\ndagster: {{history_start_date: '2026-02-01'}}\n"
    )
    (conf / "destinations" / "shop" / "instance.yaml").write_text(
        "source: {user: cdc, password_env: CDC_SOURCE_PASSWORD, server_id: 7}\n"
    )
    configset = load_config(conf)
    rng = random.Random(5)
    orders = SourceTable(
        "shop", "orders", [column("id", "bigint", pk=True), column("status", "varchar", length=16)]
    )
    log = ChangeLogWriter(DestinationLake.of(configset, "shop").change_log)
    expected: dict[date, dict[str, int]] = {}
    next_id = 1
    for day in DAYS:
        counts = {"inserts": 0, "updates": 0, "deletes": 0}
        for hour in (2, 12, 20):
            events = []
            for _ in range(10):
                keys = list(orders.rows)
                if len(keys) < 3 or rng.random() < 0.5:
                    events.append(orders.insert({"id": next_id, "status": "new"}))
                    next_id += 1
                    counts["inserts"] += 1
                elif rng.random() < 0.7:
                    events.append(orders.update(rng.choice(keys), status=f"s{rng.randint(0, 9)}"))
                    counts["updates"] += 1
                else:
                    events.append(orders.delete(rng.choice(keys)))
                    counts["deletes"] += 1
            ts = datetime(day.year, day.month, day.day, hour, tzinfo=UTC)
            log.commit(events, ts=ts, committed_at=ts + timedelta(seconds=2))
        expected[day] = counts

    # The source is down (nothing listens on its port): the tables come from the change log.
    defs = build_definitions(str(conf))
    history_key = AssetKey(["cdc", "shop", "orders_daily_history"])
    with instance_for_test() as instance:
        for day in DAYS:
            result = run_assets(defs, [history_key], instance, partition_key=day.isoformat())
            assert result.success
            (event,) = result.asset_materializations_for_node("cdc_daily_history_shop")
            metadata = {k: v.value for k, v in event.metadata.items()}
            assert {k: metadata[k] for k in expected[day]} == expected[day], day
            assert metadata["max_lag_seconds"] == pytest.approx(2.0)
            as_of = tmp_path / "lake" / "shop" / "history" / day.isoformat() / "shop.orders"
            assert DeltaTable(str(as_of)).to_pyarrow_table().num_rows == metadata["as_of_rows"]

        items = SourceTable(
            "shop", "items", [column("sku", "varchar", length=8, pk=True), column("qty", "int")]
        )
        now = datetime.now(UTC)
        log.commit([items.insert({"sku": "a", "qty": 1})], ts=now, committed_at=now)
        defs = build_definitions(str(conf))
        orders_key = AssetKey(["cdc", "shop", "orders"])
        items_key = AssetKey(["cdc", "shop", "items"])
        mirrors = run_assets(defs, [orders_key, items_key], instance)
        assert mirrors.success
        events = {e.asset_key: e for e in mirrors.get_asset_materialization_events()}
        assert set(events) == {orders_key, items_key}
        orders_meta = events[orders_key].materialization.metadata
        mirror_path = tmp_path / "lake" / "shop" / "mirror" / "shop.orders"
        assert orders_meta["dagster/row_count"].value == len(orders.rows)
        assert orders_meta["dagster/uri"].value == str(mirror_path)
        assert orders_meta["dagster/table_name"].value == "shop.orders"
        schema = orders_meta["dagster/column_schema"].value
        assert [(c.name, c.type) for c in schema.columns] == [
            ("id", "bigint"),
            ("status", "varchar"),
        ]
        assert orders_meta["rows_inserted"].value == len(orders.rows)
        mirror = DeltaTable(str(mirror_path))
        rows = {r["id"]: r["status"] for r in mirror.to_pyarrow_table().to_pylist()}
        assert rows == {key[0]: row["status"] for key, row in orders.rows.items()}

        # A downstream PySpark asset, as docs/dagster.md writes it: the mirror found through
        # its dagster/uri, read with the platform's Spark resource.
        @asset(deps=[orders_key])
        def open_orders(context: AssetExecutionContext, spark: SparkResource) -> MaterializeResult:
            event = context.instance.get_latest_materialization_event(orders_key)
            assert event is not None
            assert event.asset_materialization is not None
            uri = event.asset_materialization.metadata["dagster/uri"].value
            frame = spark.session().read.format("delta").load(str(uri))
            return MaterializeResult(metadata={"rows": frame.count()})

        user = Definitions.merge(defs, Definitions(assets=[open_orders]))
        downstream = run_assets(user, [open_orders.key], instance)
        (event,) = downstream.get_asset_materialization_events()
        assert event.materialization.metadata["rows"].value == len(orders.rows)

        # Every selected mirror is materialized (current as of now, which its freshness policy
        # measures); the data version says which one got new data: shop.items, not shop.orders.
        versions = {
            e.asset_key: e.materialization.tags.get("dagster/data_version")
            for e in run_assets(
                defs, [orders_key, items_key], instance
            ).get_asset_materialization_events()
        }
        log.commit([items.update(("a",), qty=2)], ts=now, committed_at=now)
        again = run_assets(defs, [orders_key, items_key], instance)
        assert again.success
        changed = {
            e.asset_key
            for e in again.get_asset_materialization_events()
            if e.materialization.tags.get("dagster/data_version") != versions[e.asset_key]
        }
        assert changed == {items_key}
        policy = defs.resolve_assets_def(items_key).specs_by_key[items_key].freshness_policy
        # the warning at half the budget, in whole minutes (150 s would read "3 minutes")
        assert policy == FreshnessPolicy.time_window(
            fail_window=timedelta(seconds=300), warn_window=timedelta(seconds=120)
        )


def test_cli_backfill_of_three_days_under_a_daemon(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`dagster job backfill` over three days, run by a real daemon, as the README says."""
    conf = tmp_path / "conf"
    (conf / "destinations" / "shop").mkdir(parents=True)
    (conf / "platform.yaml").write_text(
        f"lake_root: {tmp_path / 'lake'}\n"
        "dagster: {history_start_date: '2026-02-01', sensor_interval_seconds: 3600}\n"
    )
    # Disabled: the monitors must not start a CDC run; only the backfill runs.
    (conf / "destinations" / "shop" / "instance.yaml").write_text(
        "enabled: false\nsource: {user: cdc, password_env: CDC_SOURCE_PASSWORD, server_id: 7}\n"
    )
    monkeypatch.setenv("CDC_SOURCE_PASSWORD", "unused")
    monkeypatch.setenv("CDC_CONF_DIR", str(conf))
    env = dict(os.environ)
    configset = load_config(conf)
    orders = SourceTable("shop", "orders", [column("id", "bigint", pk=True)])
    log = ChangeLogWriter(DestinationLake.of(configset, "shop").change_log)
    for offset, day in enumerate(DAYS):
        events = [orders.insert({"id": 100 * offset + i}) for i in range(offset + 1)]
        ts = datetime(day.year, day.month, day.day, 12, tzinfo=UTC)
        log.commit(events, ts=ts, committed_at=ts + timedelta(seconds=1))

    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text((PROJECT / "dagster_home" / "dagster.yaml").read_text())
    env["DAGSTER_HOME"] = str(home)
    instance = DagsterInstance.from_config(str(home))
    instance.get_runs(limit=1)
    instance.all_instigator_state()
    dagster = str(Path(sys.executable).with_name("dagster"))
    workspace = str(PROJECT / "workspace.yaml")
    with (tmp_path / "daemon.log").open("wb") as out:
        daemon = subprocess.Popen(
            [sys.executable, "-m", "dagster._daemon", "run", "-w", workspace],
            cwd=PROJECT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            preexec_fn=die_with_parent,  # noqa: PLW1509 (main thread)
        )  # fmt: skip
    try:
        subprocess.run(
            [dagster, "job", "backfill", "-w", workspace, "-j", "cdc_daily_history",
             "--from", DAYS[0].isoformat(), "--to", DAYS[-1].isoformat(), "--noprompt"],
            cwd=PROJECT, env=env, check=True, capture_output=True, timeout=120,
        )  # fmt: skip
        key = AssetKey(["cdc", "shop", "orders_daily_history"])

        def three_partitions() -> list[EventLogRecord]:
            records = instance.fetch_materializations(key, limit=10).records
            return list(records) if len({r.partition_key for r in records}) == 3 else []

        records = wait_for(
            three_partitions,
            "the backfill to materialize three partitions",
            timeout=240,
            interval=1,
        )
        for record in records:
            materialization = record.asset_materialization
            assert materialization is not None
            day = date.fromisoformat(str(record.partition_key))
            assert materialization.metadata["inserts"].value == DAYS.index(day) + 1
    finally:
        left = stop_process_group(daemon)  # also its code servers, which ignore SIGTERM
        instance.dispose()
    assert left == [], f"processes of the daemon's group outlived it: {left}"
