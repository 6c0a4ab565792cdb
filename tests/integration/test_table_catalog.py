"""The table catalog behind the per-table assets: a real MariaDB's captured tables with their
column types, joined with a real change log's tables; a source that is down costs little."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from cdc_platform.config import load_config
from cdc_platform.coordination.table_catalog import discover_tables
from cdc_platform.sink.destination_lake import DestinationLake
from cdc_platform.testing.destinations import PASSWORD_ENV, write_conf
from cdc_platform.testing.spark_changes import ChangeLogWriter, SourceTable, column
from tests.conftest import MariaDBDatabase

pytestmark = pytest.mark.integration


def test_source_and_change_log_tables_with_their_columns(
    mariadb: MariaDBDatabase, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = mariadb.name
    mariadb.server.execute(
        "CREATE TABLE orders (id BIGINT UNSIGNED PRIMARY KEY, total DECIMAL(10,2) NOT NULL, "
        "note VARCHAR(20))",
        "CREATE TABLE audit_log (id INT PRIMARY KEY)",
        database=db,
    )
    write_conf(
        tmp_path / "conf",
        destination="shop",
        server=mariadb.server,
        user=mariadb.user,
        database=db,
        lake_root=tmp_path / "lake",
    )
    instance = tmp_path / "conf" / "destinations" / "shop" / "instance.yaml"
    instance.write_text(
        instance.read_text().replace(
            "source:", f"source:\n  exclude_tables: ['{db}\\.audit_.*']", 1
        )
    )
    monkeypatch.setenv(PASSWORD_ENV, mariadb.user.password)
    configset = load_config(tmp_path / "conf")
    assert configset.destinations["shop"].config.source.exclude_tables

    # A table dropped from the source lives on in the change log (and its mirror).
    gone = SourceTable(db, "gone", [column("id", "int", pk=True)])
    now = datetime.now(UTC)
    ChangeLogWriter(DestinationLake.of(configset, "shop").change_log).commit(
        [gone.insert({"id": 1})], ts=now, committed_at=now
    )

    catalog = discover_tables(configset, "shop")
    assert catalog.problems == ()
    assert [t.name for t in catalog.tables] == [f"{db}.gone", f"{db}.orders"]
    orders = catalog.tables[1]
    assert orders.found_in == ("source",)
    assert [(c.name, c.type, c.nullable, c.primary_key) for c in orders.columns] == [
        ("id", "bigint(20) unsigned", False, True),
        ("total", "decimal(10,2)", False, False),
        ("note", "varchar(20)", True, False),
    ]
    assert catalog.tables[0].found_in == ("change_log",)
    assert [c.name for c in catalog.tables[0].columns] == ["id"]

    # The source goes down: the change log's tables remain, and it says why the rest is missing.
    text = instance.read_text().replace(f"port: {mariadb.server.port}", "port: 9")
    instance.write_text(text)
    started = time.monotonic()
    offline = discover_tables(load_config(tmp_path / "conf"), "shop")
    assert time.monotonic() - started < 10
    assert [t.name for t in offline.tables] == [f"{db}.gone"]
    (problem,) = offline.problems
    assert problem.startswith("source:")
    assert mariadb.user.password not in problem
