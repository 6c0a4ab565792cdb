"""`cdc-platform tables`: what a destination's filters capture on a real server, and why the
other tables are skipped, before any run."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest

from cdc_platform.cli import main
from cdc_platform.testing.destinations import PASSWORD_ENV, write_conf
from tests.conftest import MariaDBDatabase

pytestmark = pytest.mark.integration


def run(*args: str) -> tuple[int, str]:
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = main(list(args))
    return code, printed.getvalue()


def test_tables_lists_captured_and_skipped_with_reasons(
    mariadb: MariaDBDatabase, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = mariadb.name
    mariadb.server.execute(
        "CREATE TABLE orders (id INT PRIMARY KEY)",
        "CREATE TABLE audit_log (at DATETIME, what TEXT)",
        "CREATE TABLE tmp_scratch (id INT PRIMARY KEY)",
        "CREATE VIEW recent AS SELECT id FROM orders",
        "INSERT INTO orders VALUES (1), (2), (3)",
        database=db,
    )
    conf = tmp_path / "conf"
    write_conf(
        conf,
        destination="shop",
        server=mariadb.server,
        user=mariadb.user,
        database=db,
        lake_root=tmp_path / "lake",
    )
    instance = conf / "destinations" / "shop" / "instance.yaml"
    instance.write_text(
        instance.read_text().replace(
            "  reconnect_initial_seconds",
            f"  exclude_tables: ['{db}\\.tmp_.*']\n  reconnect_initial_seconds",
        )
    )
    monkeypatch.setenv(PASSWORD_ENV, mariadb.user.password)
    code, text = run("tables", "--conf", str(conf), "--destination", "shop")
    assert code == 0, text
    lines = {line.split()[1]: line for line in text.splitlines()[1:] if line.strip()}
    assert lines[f"{db}.orders"].lstrip().startswith("captured")
    assert "no primary key: its mirror is a multiset" in lines[f"{db}.audit_log"]
    assert lines[f"{db}.tmp_scratch"].lstrip().startswith("skipped")
    assert f"excluded by exclude_tables '{db}\\\\.tmp_.*'" in lines[f"{db}.tmp_scratch"]
    assert "a view: it has no rows of its own in the binlog" in lines[f"{db}.recent"]
    assert text.startswith("shop: 2 captured, ")  # other tests' databases may be skipped too

    code, text = run("tables", "--conf", str(conf), "--destination", "shop", "--json")
    listed = {t["table"]: t for t in json.loads(text)}
    assert listed[f"{db}.orders"]["captured"] is True
    assert listed[f"{db}.recent"]["captured"] is False


def test_filters_that_capture_nothing_fail(
    mariadb: MariaDBDatabase, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mariadb.server.execute("CREATE TABLE t (id INT PRIMARY KEY)", database=mariadb.name)
    conf = tmp_path / "conf"
    write_conf(
        conf,
        destination="shop",
        server=mariadb.server,
        user=mariadb.user,
        database=f"{mariadb.name}_typo",
        lake_root=tmp_path / "lake",
    )
    monkeypatch.setenv(PASSWORD_ENV, mariadb.user.password)
    code, text = run("tables", "--conf", str(conf), "--destination", "shop")
    assert code == 1
    assert f"{mariadb.name}.t" in text
    assert "matches no include_tables pattern" in text
    assert "capture no table" in text
