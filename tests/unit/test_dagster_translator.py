"""The translator names every asset of a destination; the Spark resource lives one execution."""

from __future__ import annotations

from datetime import date
from pathlib import Path
from typing import Any

import pytest
from dagster import AssetKey, Definitions, build_resources

from cdc_platform.config import ConfigSet, load_config
from dagster_defs import resources
from dagster_defs.assets import change_log_specs
from dagster_defs.cdc_job import build_cdc_destination_job
from dagster_defs.mirror_catch_up import build_mirror_catch_up
from dagster_defs.reconcile import check_key, reconcile_checks, reconcile_job
from dagster_defs.resources import PlatformResource, SparkResource
from dagster_defs.spark_assets import spark_assets
from dagster_defs.translator import CdcTranslator

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


class LakeTranslator(CdcTranslator):
    """Renames every key and group, as a user of the code location might."""

    def key_prefix(self, destination: str) -> list[str]:
        return ["lake", destination]

    def group_name(self, destination: str) -> str:
        return f"live_{destination}"


def _keys(configset: ConfigSet, translator: CdcTranslator) -> set[AssetKey]:
    specs = change_log_specs(configset, translator)
    assets = spark_assets(configset, translator)
    return {spec.key for spec in specs} | {key for a in assets for key in a.keys}


def test_default_keys_paths_and_groups(configset: ConfigSet) -> None:
    translator = CdcTranslator()
    assert _keys(configset, translator) == {
        AssetKey(["cdc", name, part])
        for name in ("broken", "shop")
        for part in ("changes", "mirrors", "daily_history")
    }
    (spec,) = [s for s in change_log_specs(configset) if s.key == translator.changes_key("shop")]
    assert spec.group_name == "cdc"
    assert spec.metadata["table_uri"] == configset.table_uri("shop")
    (broken,) = [s for s in change_log_specs(configset) if s.key.path[1] == "broken"]
    assert broken.metadata["table_uri"] == str(configset.lake_root / "broken")
    assert check_key("shop").asset_key == AssetKey(["cdc", "shop", "mirrors"])
    assert translator.mirror_root(configset, "shop") == str(configset.lake_root / "shop/mirror")


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
    assert translator.destination_root(configset, "shop") == "s3://lake/prefix/shop"
    assert translator.mirror_root(configset, "shop") == "s3://lake/prefix/shop/mirror"
    day = date(2026, 3, 1)
    history = translator.history_root(configset, "shop", day)
    assert history == "s3://lake/prefix/shop/history/2026-03-01"
    assert len(spark_assets(configset, translator)) == 2


def test_a_subclass_renames_every_definition_at_once(configset: ConfigSet) -> None:
    translator = LakeTranslator()
    keys = _keys(configset, translator)
    assert {key.path[0] for key in keys} == {"lake"}
    checks = reconcile_checks(configset, translator)
    assert {key.asset_key for c in checks for key in c.check_keys} == {
        translator.mirrors_key("broken"),
        translator.mirrors_key("shop"),
    }
    catch_up = build_mirror_catch_up(["shop"], translator=translator)
    assert catch_up.asset_selection is not None
    # The whole code location resolves: checks, deps and the catch-up sensor find their assets.
    defs = Definitions(
        assets=[*change_log_specs(configset, translator), *spark_assets(configset, translator)],
        asset_checks=checks,
        jobs=[build_cdc_destination_job(translator), reconcile_job(checks)],
        sensors=[catch_up],
        resources={
            "platform": PlatformResource(conf_dir=str(configset.conf_dir)),
            "spark": SparkResource(conf_dir=str(configset.conf_dir)),
        },
    )
    graph = defs.get_repository_def().asset_graph
    mirrors = graph.get(translator.mirrors_key("shop"))
    assert mirrors.group_name == "live_shop"
    assert set(mirrors.parent_keys) == {translator.changes_key("shop")}


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
