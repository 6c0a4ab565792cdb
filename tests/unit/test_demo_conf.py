"""The demo's copy of the configuration: ``--spark classic`` puts its Spark assets on Apache
Spark, nothing else changes."""

from __future__ import annotations

import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from cdc_platform.config import load_config
from cdc_platform.demo import demo_conf_dir
from cdc_platform.testing.mariadb import MariaDBServer

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]


def _server() -> MariaDBServer:
    stand_in: Any = SimpleNamespace(host="127.0.0.1", port=3399)
    return cast(MariaDBServer, stand_in)


@pytest.mark.parametrize("mode", [None, "classic", "embedded"])
def test_the_spark_flag_sets_only_the_spark_mode(tmp_path: Path, mode: str | None) -> None:
    conf = tmp_path / "conf"
    shutil.copytree(REPO / "conf", conf)
    demo_conf = demo_conf_dir(conf, tmp_path / "work", _server(), "shop", mode)
    loaded = load_config(demo_conf)
    assert loaded.platform.spark.mode == (mode or load_config(conf).platform.spark.mode)
    assert loaded.platform.lake_root == str(tmp_path / "work" / "lake")
