"""The translator names every asset of a destination; the Spark resource lives one execution."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import pytest
from dagster import (
    AssetKey,
    AssetSpec,
    DagsterInvalidDefinitionError,
    DefaultScheduleStatus,
    Definitions,
    asset,
    build_resources,
    build_schedule_context,
)

from cdc_platform.config import ConfigSet, load_config
from cdc_platform.coordination.table_catalog import Catalog, CatalogColumn, CatalogTable
from cdc_platform.errors import ConfigError
from cdc_platform.sink.destination_lake import DestinationLake
from dagster_defs import build_definitions, resources
from dagster_defs.assets import change_log_specs
from dagster_defs.resources import (
    PlatformResource,
    SparkResource,
    destination_root,
    history_root,
    mirrors_root,
)
from dagster_defs.translator import CdcTableProps, CdcTranslator

pytestmark = pytest.mark.unit


@pytest.fixture
def configset(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ConfigSet:
    monkeypatch.setenv("CDC_SOURCE_PASSWORD", "x")
    conf = tmp_path / "conf"
    (conf / "destinations" / "shop").mkdir(parents=True)
    (conf / "destinations" / "broken").mkdir()
    (conf / "platform.yaml").write_text(f"lake_root: {tmp_path / 'lake'}\n")
    (conf / "destinations" / "shop" / "instance.yaml").write_text(
        "source: {user: cdc, password_env: CDC_SOURCE_PASSWORD, server_id: 7}\n"
    )
    (conf / "destinations" / "broken" / "instance.yaml").write_text("source: [\n")
    return load_config(conf)


CATALOGS = {
    "shop": Catalog(
        "shop",
        (
            CatalogTable(
                "shop",
                "items",
                (CatalogColumn("id", "int(11)", False, True), CatalogColumn("sku", "varchar(20)")),
                ("source",),
            ),
            CatalogTable("shop", "orders", (), ("change_log",)),
        ),
    )
}


class LakeTranslator(CdcTranslator):
    """Renames every key and group, as a user of the code location might."""

    def key_prefix(self, destination: str) -> list[str]:
        return ["lake", destination]

    def group_name(self, destination: str) -> str:
        return f"live_{destination}"


def _defs(configset: ConfigSet, translator: CdcTranslator | None = None) -> Definitions:
    return build_definitions(str(configset.conf_dir), translator=translator, catalogs=CATALOGS)


def _keys(defs: Definitions) -> set[AssetKey]:
    return set(defs.resolve_asset_graph().get_all_asset_keys())


def test_default_keys_paths_and_groups(configset: ConfigSet) -> None:
    """Readable keys: the database named like the destination is not repeated, and each
    history node is named after its table (not two nodes both called daily_history)."""
    translator = CdcTranslator()
    defs = _defs(configset)
    assert _keys(defs) == {AssetKey(["cdc", name, "changes"]) for name in ("broken", "shop")} | {
        AssetKey(["cdc", "shop", f"{table}{part}"])
        for table in ("items", "orders")
        for part in ("", "_daily_history")
    }
    # another database keeps its part; a table named like the change log keeps the database
    assert translator.table_key("shop", "crm", "people").path == ["cdc", "shop", "crm", "people"]
    assert translator.table_key("shop", "shop", "changes").path == [
        "cdc",
        "shop",
        "shop",
        "changes",
    ]
    assert translator.table_history_key("shop", "crm", "people").path == [
        "cdc", "shop", "crm", "people_daily_history"
    ]  # fmt: skip
    (spec,) = [s for s in change_log_specs(configset) if s.key == translator.changes_key("shop")]
    assert spec.group_name == "cdc"
    assert spec.metadata["table_uri"] == DestinationLake.of(configset, "shop").change_log
    (broken,) = [s for s in change_log_specs(configset) if s.key.path[1] == "broken"]
    assert broken.metadata["table_uri"] == str(configset.lake_root / "broken")
    assert mirrors_root(configset, "shop") == str(configset.lake_root / "shop/mirror")
    graph = defs.resolve_asset_graph()
    items = graph.get(AssetKey(["cdc", "shop", "items"]))
    assert set(items.parent_keys) == {translator.changes_key("shop")}
    assert items.group_name == "cdc"
    assert items.metadata["dagster/uri"] == str(configset.lake_root / "shop/mirror/shop.items")
    assert items.metadata["dagster/table_name"] == "shop.items"
    schema = items.metadata["dagster/column_schema"]
    assert [(c.name, c.type, c.constraints.nullable) for c in schema.columns] == [
        ("id", "int(11)", False),
        ("sku", "varchar(20)", True),
    ]
    assert (
        "dagster/column_schema"
        not in graph.get(translator.table_key("shop", "shop", "orders")).metadata
    )
    # per-table reconciliation checks, and the change log's lag check
    check_keys = {(k.asset_key.path[-1], k.name) for k in graph.asset_check_keys}
    assert check_keys == {
        *((table, check) for table in ("items", "orders") for check in ("reconciled",)),
        ("changes", "lag_within_budget"),
    }


def test_lake_locations_on_object_storage_are_uris(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every lake location of a destination stays an ``s3://`` URI (no Path arithmetic)."""
    monkeypatch.setenv("CDC_SOURCE_PASSWORD", "x")
    conf = tmp_path / "conf"
    (conf / "destinations" / "shop").mkdir(parents=True)
    (conf / "platform.yaml").write_text("lake_root: s3://lake/prefix\n")
    (conf / "destinations" / "shop" / "instance.yaml").write_text(
        "source: {user: cdc, password_env: CDC_SOURCE_PASSWORD, server_id: 7}\n"
    )
    configset = load_config(conf)
    translator = CdcTranslator()
    assert destination_root(configset, "shop") == "s3://lake/prefix/shop"
    assert mirrors_root(configset, "shop") == "s3://lake/prefix/shop/mirror"
    day = date(2026, 3, 1)
    history = history_root(configset, "shop", day)
    assert history == "s3://lake/prefix/shop/history/2026-03-01"
    graph = _defs(configset).resolve_asset_graph()
    items = graph.get(translator.table_key("shop", "shop", "items"))
    assert items.metadata["dagster/uri"] == "s3://lake/prefix/shop/mirror/shop.items"


def test_a_subclass_renames_every_definition_at_once(configset: ConfigSet) -> None:
    translator = LakeTranslator()
    defs = _defs(configset, translator)
    keys = _keys(defs)
    assert {key.path[0] for key in keys} == {"lake"}
    graph = defs.resolve_asset_graph()
    assert {k.asset_key for k in graph.asset_check_keys if k.name == "reconciled"} == {
        translator.table_key("shop", "shop", "items"),
        translator.table_key("shop", "shop", "orders"),
    }
    orders = graph.get(AssetKey(["lake", "shop", "orders"]))
    assert orders.group_name == "live_shop"
    assert set(orders.parent_keys) == {translator.changes_key("shop")}
    # every job resolves against the renamed assets (the catch-up sensor finds its targets)
    for job in defs.get_repository_def().get_all_jobs():
        assert job.name


def test_merges_with_a_users_definitions(configset: ConfigSet) -> None:
    @asset(deps=[AssetKey(["cdc", "shop", "orders"])])
    def order_report() -> None: ...

    defs = Definitions.merge(_defs(configset), Definitions(assets=[order_report]))
    graph = defs.resolve_asset_graph()
    assert set(graph.get(order_report.key).parent_keys) == {AssetKey(["cdc", "shop", "orders"])}


def test_catalog_json_round_trip() -> None:
    catalog = CATALOGS["shop"]
    assert Catalog.from_json(catalog.to_json()) == catalog
    with pytest.raises(ValueError, match="format"):
        Catalog.from_json('{"version": 99}')


def test_spark_resource_session_lives_one_execution(
    configset: ConfigSet, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[FakeFactory] = []

    class FakeFactory:
        def __init__(self, config: Any, lake: Any) -> None:
            self.config, self.lake, self.stopped = config, lake, False
            made.append(self)

        def session(self) -> str:
            return "session"

        def stop(self) -> None:
            self.stopped = True

    monkeypatch.setattr(resources, "SparkSessionFactory", FakeFactory)
    spark = SparkResource(conf_dir=str(configset.conf_dir))
    with pytest.raises(RuntimeError, match="only while a step runs"):
        spark.session()
    for _ in range(2):
        with build_resources(
            {"spark": spark, "platform": PlatformResource(conf_dir=str(configset.conf_dir))}
        ) as live:
            assert live.spark.session() == "session"
            assert not made[-1].stopped
        assert made[-1].stopped
    assert len(made) == 2
    assert made[0].config == configset.platform.spark
    assert made[0].lake == configset.lake  # the session reaches the lake with its settings


class DescribedTranslator(CdcTranslator):
    """Changes what a mirror's spec says, the dagster-dlt way."""

    def get_asset_spec(self, props: CdcTableProps) -> AssetSpec:
        spec = super().get_asset_spec(props)
        return spec.replace_attributes(owners=["team:data"], description=f"{props.table.name}!")


def test_get_asset_spec_shapes_each_mirror_and_cannot_steal_its_key(
    configset: ConfigSet,
) -> None:
    defs = _defs(configset, DescribedTranslator())
    items = defs.resolve_asset_graph().get(AssetKey(["cdc", "shop", "items"]))
    assert items.owners == ["team:data"]
    assert items.description == "shop.items!"
    assert items.freshness_policy is not None  # the lag budget's, added where none was set

    class KeyChanging(CdcTranslator):
        def get_asset_spec(self, props: CdcTableProps) -> AssetSpec:
            return super().get_asset_spec(props).replace_attributes(key=AssetKey("elsewhere"))

    with pytest.raises(DagsterInvalidDefinitionError, match="rename mirrors through"):
        _defs(configset, KeyChanging())


@pytest.mark.parametrize(
    ("platform", "want"),
    [
        ("", {"reconcile_sensor": 30, "cdc_run_failure_alert": 15, "mirror_refresh": 15}),
        (
            "dagster: {sensor_interval_seconds: 1}\nreconcile: {interval_minutes: [0.05, 0.1]}\n",
            {"reconcile_sensor": 3, "cdc_run_failure_alert": 1, "mirror_refresh": 5},
        ),
        (
            "dagster: {sensor_interval_seconds: 60}\n",
            {"reconcile_sensor": 60, "cdc_run_failure_alert": 60, "mirror_refresh": 60},
        ),
    ],
)
def test_sensors_tick_at_the_configured_interval(
    configset: ConfigSet, platform: str, want: dict[str, int]
) -> None:
    """The failure alert follows `dagster.sensor_interval_seconds` (not Dagster's 30 s), and the
    reconcile sensor never ticks less often than the shortest reconcile interval."""
    path = configset.conf_dir / "platform.yaml"
    path.write_text(path.read_text() + platform)
    defs = build_definitions(str(configset.conf_dir), catalogs=CATALOGS)
    got = {s.name: s.minimum_interval_seconds for s in defs.sensors or [] if s.name in want}
    assert got == want


LEGACY = {
    AssetKey(["cdc", "shop", "shop", table, *part])
    for table in ("items", "orders")
    for part in ([], ["daily_history"])
}


def test_legacy_keys_stay_available_through_the_option(configset: ConfigSet) -> None:
    """Existing users keep the keys they had: the translator's option, or platform.yaml's."""
    assert _keys(_defs(configset, CdcTranslator(key_style="legacy"))) >= LEGACY
    path = configset.conf_dir / "platform.yaml"
    path.write_text(path.read_text() + "dagster: {key_style: legacy}\n")
    assert _keys(build_definitions(str(configset.conf_dir), catalogs=CATALOGS)) >= LEGACY
    # a translator's own option wins over platform.yaml's
    readable = _keys(build_definitions(str(configset.conf_dir), translator=CdcTranslator(
        key_style="readable"), catalogs=CATALOGS))  # fmt: skip
    assert AssetKey(["cdc", "shop", "items"]) in readable


OWNED = """\
dagster:
  owners: [team:data]
  tags: {domain: sales}
  destinations:
    shop: {owners: [ana@example.com, team:shop], tags: {tier: gold}, source_kind: mariadb}
"""


def test_owners_tags_and_kinds_come_from_configuration(configset: ConfigSet) -> None:
    """Like dagster-sling and dagster-dlt: the source's kind beside spark/delta, owners and
    tags (destination, database, the configured ones) on the change log, mirrors and
    history."""
    path = configset.conf_dir / "platform.yaml"
    path.write_text(path.read_text() + OWNED)
    graph = build_definitions(str(configset.conf_dir), catalogs=CATALOGS).resolve_asset_graph()
    translator = CdcTranslator()
    mirror = graph.get(translator.table_key("shop", "shop", "items"))
    history = graph.get(translator.table_history_key("shop", "shop", "items"))
    changes = graph.get(translator.changes_key("shop"))
    for node in (mirror, history, changes):
        assert node.owners == ["ana@example.com", "team:shop"], node.key
        assert {"domain": "sales", "tier": "gold", "cdc/destination": "shop"}.items() <= (
            node.tags.items()
        ), node.key
    assert mirror.tags["cdc/database"] == history.tags["cdc/database"] == "shop"
    assert mirror.kinds == {"mariadb", "spark", "delta"}
    assert {"mariadb", "delta"} <= changes.kinds
    broken = graph.get(translator.changes_key("broken"))
    assert broken.owners == ["team:data"]  # the platform's owners
    assert broken.tags["domain"] == "sales"


def test_the_detected_source_kind_is_the_default_kind(configset: ConfigSet) -> None:
    catalogs = {"shop": replace(CATALOGS["shop"], source_kind="mariadb")}
    graph = build_definitions(str(configset.conf_dir), catalogs=catalogs).resolve_asset_graph()
    assert "mariadb" in graph.get(CdcTranslator().table_key("shop", "shop", "items")).kinds
    graph = _defs(configset).resolve_asset_graph()  # unknown: mysql
    assert "mysql" in graph.get(CdcTranslator().table_key("shop", "shop", "items")).kinds
    assert Catalog.from_json(catalogs["shop"].to_json()).source_kind == "mariadb"


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("owners: [sales]", "dagster.owners.*an email address.*team:sales"),
        ("tags: {'a b': x}", "tag key 'a b'"),
        ("tags: {tier: 'gold plated'}", "tag tier: value 'gold plated'"),
        ("tags: {tier: 3}", "quote numbers"),
        ("tags: {cdc/destination: x}", "reserved"),
        ("destinations: {shop: {owners: [x@]}}", "dagster.destinations.shop.owners"),
        ("destinations: {shop: {source_kind: postgres}}", "source_kind"),
        ("key_style: short", "key_style"),
    ],
)
def test_invalid_owners_and_tags_are_config_errors(
    configset: ConfigSet, setting: str, message: str
) -> None:
    """Checked when platform.yaml loads, with Dagster's rules: an error naming the key, not
    a code location that fails to load."""
    path = configset.conf_dir / "platform.yaml"
    path.write_text(path.read_text() + f"dagster: {{{setting}}}\n")
    with pytest.raises(ConfigError, match=message):
        load_config(configset.conf_dir)


def test_history_has_its_own_table_reads_its_mirror_and_is_scheduled(
    configset: ConfigSet,
) -> None:
    """The history is not the mirror's table, depends on what it reads (the change log and
    the table's mirror, each history on its own mirror only), and a schedule materializes each
    finished UTC day, one run per destination."""
    defs = _defs(configset)
    graph = defs.resolve_asset_graph()
    translator = CdcTranslator()
    for table in ("items", "orders"):
        history = graph.get(translator.table_history_key("shop", "shop", table))
        assert history.metadata["dagster/table_name"] == f"history.shop.{table}"
        assert set(history.parent_keys) == {
            translator.changes_key("shop"),
            translator.table_key("shop", "shop", table),
        }
    schedule = defs.get_schedule_def("daily_history_schedule")
    assert schedule.execution_timezone == "UTC"
    assert schedule.cron_schedule == "6 0 * * *"  # the 300 s lag budget plus a minute
    assert schedule.default_status == DefaultScheduleStatus.RUNNING
    tick = datetime(2026, 3, 2, 0, 6, tzinfo=UTC)
    repository = defs.get_repository_def()
    with build_schedule_context(scheduled_execution_time=tick, repository_def=repository) as ctx:
        (request,) = schedule.evaluate_tick(ctx).run_requests or []
    assert request.partition_key == "2026-03-01"  # the day that ended, not today's
    assert set(request.asset_selection or []) == {
        translator.table_history_key("shop", "shop", t) for t in ("items", "orders")
    }
    assert request.tags["cdc/history"] == "shop"
