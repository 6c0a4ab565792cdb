"""``CdcComponent`` in a components project driven by the ``dg`` CLI: scaffolded with
``dg scaffold defs``, its state (the tables, read from a real MariaDB's information_schema)
written by ``dg utils refresh-defs-state``, and ``dg list defs`` listing one asset per table.
With the source then down, the project still lists them (from the stored state), in seconds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from cdc_platform.testing.destinations import PASSWORD_ENV, write_conf
from cdc_platform.testing.workload import Workload
from tests.conftest import MariaDBDatabase

pytestmark = pytest.mark.integration

PROJECT = Path(__file__).resolve().parents[2]

PYPROJECT = """\
[project]
name = "analytics"
version = "0.1.0"
requires-python = ">=3.11"
dependencies = []

[tool.dg]
directory_type = "project"

[tool.dg.project]
root_module = "analytics"
"""

DEFINITIONS = """\
from pathlib import Path

from dagster import definitions, load_from_defs_folder


@definitions
def defs():
    return load_from_defs_folder(path_within_project=Path(__file__).parent)
"""


def dg(project: Path, env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [str(Path(sys.executable).with_name("dg")), *args],
        cwd=project, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    return done.stdout


def asset_keys(listing: str) -> set[str]:
    doc: dict[str, Any] = json.loads(listing[listing.index("{") :])
    return {str(a["asset_key"]) for a in doc["assets"]}


def test_component_lists_one_asset_per_table(mariadb: MariaDBDatabase, tmp_path: Path) -> None:
    Workload(mariadb.server, mariadb.name, seed=3).create_schema()  # customers, orders
    project = tmp_path / "analytics"
    (project / "analytics" / "defs").mkdir(parents=True)
    (project / "pyproject.toml").write_text(PYPROJECT)
    (project / "analytics" / "__init__.py").write_text("")
    (project / "analytics" / "definitions.py").write_text(DEFINITIONS)
    write_conf(
        project / "conf",
        destination="shop",
        server=mariadb.server,
        user=mariadb.user,
        database=mariadb.name,
        lake_root=tmp_path / "lake",
    )
    env = {
        **os.environ,
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]),
        "VIRTUAL_ENV": str(Path(sys.executable).parents[1]),
        "PYTHONPATH": os.pathsep.join([str(project), str(PROJECT)]),
        "DAGSTER_HOME": str(tmp_path / "dagster_home"),
        PASSWORD_ENV: mariadb.user.password,
    }
    (tmp_path / "dagster_home").mkdir()

    dg(project, env, "scaffold", "defs", "dagster_defs.CdcComponent", "cdc")
    defs_yaml = project / "analytics" / "defs" / "cdc" / "defs.yaml"
    scaffolded = defs_yaml.read_text()
    assert "type: dagster_defs.CdcComponent" in scaffolded
    assert "conf_dir: conf" in scaffolded
    defs_yaml.write_text(
        "type: dagster_defs.CdcComponent\n\n"
        "attributes:\n  conf_dir: conf\n  key_prefix: [lake]\n  group: replicas\n"
        # the state is refreshed on request only (as a deployment image build does)
        "  defs_state: {management_type: LOCAL_FILESYSTEM, refresh_if_dev: false}\n"
    )
    before = asset_keys(dg(project, env, "list", "defs", "--json"))
    assert not any(key.endswith("/orders") for key in before)  # no state, no change log yet
    dg(project, env, "utils", "refresh-defs-state")
    tables = {f"lake/shop/{mariadb.name}/{t}" for t in ("customers", "orders")}
    listed = asset_keys(dg(project, env, "list", "defs", "--json"))
    assert tables <= listed
    assert {"lake/shop/changes", f"lake/shop/{mariadb.name}/orders_daily_history"} <= listed

    # The source goes away: the tables stay (the stored state), the project still loads.
    instance = project / "conf" / "destinations" / "shop" / "instance.yaml"
    text = instance.read_text().replace(f"port: {mariadb.server.port}", "port: 9")
    assert "port: 9" in text
    instance.write_text(text)
    assert tables <= asset_keys(dg(project, env, "list", "defs", "--json"))

    # defs.yaml picks the tables (globs on db.table) and tags them, like Fivetran's
    # connector_selector: orders is left out, customers keeps its asset.
    defs_yaml.write_text(
        defs_yaml.read_text()
        + '  table_selector: {include: ["*"], exclude: ["*.orders"]}\n'
        + "  tags: {team: data}\n"
    )
    selected = asset_keys(dg(project, env, "list", "defs", "--json"))
    assert f"lake/shop/{mariadb.name}/customers" in selected
    assert not any(key.endswith("/orders") for key in selected)
