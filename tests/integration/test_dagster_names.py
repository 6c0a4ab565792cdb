"""Any table name MySQL allows gets valid, unique Dagster names (issue 25, item 1).

Tables with quotes, backticks, ``|``, ``@``, ``$``, brackets, spaces, dots, dashes, slashes,
non-ASCII letters and names differing only in case are created on a real MariaDB; the
definitions are built from its information_schema, as the code location does when it loads.
Every table gets its own mirror (column comments as column descriptions), history asset and
checks, the definitions resolve (jobs, sensors), and each asset is picked out by the selection
syntax docs/dagster.md documents.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import unquote

import pytest
from dagster import AssetKey, AssetSelection

from cdc_platform.testing.destinations import PASSWORD_ENV, write_conf
from dagster_defs import build_definitions
from dagster_defs.reconcile import CHECK_NAME
from tests.conftest import MariaDBDatabase

pytestmark = pytest.mark.integration

ODD_NAMES = [
    "it's",
    'say "hi"',
    "back`tick",
    "a|b",
    "user@host",
    "price$",
    "[bracketed]",
    "with space",
    "dot.ted",
    "dash-ed",
    "slash/ed",
    "star*",
    "per%cent",
    "back\\slash",
    "Ünïcödé",
    "表",
    "Orders",
    "orders",
    "ORDERS",
    "select",
    "a__b",
]


def quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def literal(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "''") + "'"


def test_odd_table_names_load_and_are_selectable(
    mariadb: MariaDBDatabase, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mariadb.server.execute(
        *[
            f"CREATE TABLE {quoted(n)} (id INT PRIMARY KEY COMMENT {literal('key of ' + n)}, v INT)"
            for n in ODD_NAMES
        ],
        database=mariadb.name,
    )
    conf = tmp_path / "conf"
    write_conf(
        conf,
        destination="odd",
        server=mariadb.server,
        user=mariadb.user,
        database=mariadb.name,
        lake_root=tmp_path / "lake",
    )
    monkeypatch.setenv(PASSWORD_ENV, mariadb.user.password)

    defs = build_definitions(str(conf))  # raised DagsterInvalidDefinitionError before
    graph = defs.resolve_asset_graph()
    defs.resolve_all_job_defs()
    keys = graph.get_all_asset_keys()
    mirrors = {k for k in keys if not k.path[-1].endswith("_daily_history")}
    found = {k.path[-1] for k in mirrors if len(k.path) == 4}
    assert len(found) == len(ODD_NAMES)

    for name in ODD_NAMES:
        key = next(k for k in mirrors if len(k.path) == 4 and _source(k) == name)
        # the documented selection: key:"<the key's string>" picks exactly this mirror
        selection = f'key:"{key.to_user_string()}"'
        assert AssetSelection.from_string(selection).resolve(graph) == {key}, selection
        # the source's column comments are the columns' descriptions
        schema = graph.get(key).metadata["dagster/column_schema"]
        assert schema.columns[0].description == f"key of {name}"
        history = AssetKey([*key.path[:-1], f"{key.path[-1]}_daily_history"])
        assert history in graph.get_all_asset_keys()
        assert any(c.name == CHECK_NAME for c in graph.get_check_keys_for_assets({key}))


def _source(key: AssetKey) -> str:
    """The source name a key part encodes (percent-decoding, as docs/dagster.md says)."""
    return unquote(key.path[-1])
