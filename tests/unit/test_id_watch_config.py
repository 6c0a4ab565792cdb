"""The id_watch source mode in instance.yaml: good files load, bad ones name file and key."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdc_platform.config import load_config
from cdc_platform.errors import ConfigFileError

pytestmark = pytest.mark.unit

ENV = {"CDC_SOURCE_PASSWORD": "s3cret-value"}

GOOD = """\
source:
  host: 127.0.0.1
  user: cdc
  password_env: CDC_SOURCE_PASSWORD
  server_id: 1001
  mode: id_watch
  id_watch:
    poll_interval_seconds: 0.2
    list_interval_minutes: [10, 20]
    tables:
      - table: registry.app_revision
        id_column: id
        created_column: gmt_create
        stability_delay_seconds: 1.5
        expire:
          deleted_column: deleted
          modified_column: gmt_modified
          after_seconds: 86400
      - table: registry.interface_apps
        id_column: id
        created_column: gmt_create
"""


def write_destination(conf: Path, name: str, text: str) -> Path:
    directory = conf / "destinations" / name
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "instance.yaml"
    path.write_text(text)
    return path


@pytest.fixture
def conf(tmp_path: Path) -> Path:
    root = tmp_path / "conf"
    root.mkdir()
    return root


def test_id_watch_destination_loads_with_defaults(conf: Path) -> None:
    write_destination(conf, "registry", GOOD)
    loaded = load_config(conf, ENV)
    assert loaded.errors == {}
    source = loaded.destinations["registry"].config.source
    assert source.mode == "id_watch"
    assert source.id_watch is not None
    assert source.id_watch.list_interval_minutes == (10.0, 20.0)
    first, second = source.id_watch.tables
    assert (first.db, first.name) == ("registry", "app_revision")
    assert first.stability_delay_seconds == 1.5
    assert first.expire is not None
    assert (first.expire.batch_size, first.expire.max_batches_per_round) == (500, 20)
    assert second.page_size == 1000
    assert second.stability_delay_seconds == 1.0
    assert second.expire is None


def test_binlog_destinations_are_unchanged(conf: Path) -> None:
    text = GOOD.split("  mode: id_watch\n", maxsplit=1)[0]
    write_destination(conf, "shop", text)
    source = load_config(conf, ENV).destinations["shop"].config.source
    assert source.mode == "binlog"
    assert source.id_watch is None


BAD = [
    pytest.param(
        GOOD.replace("  id_watch:\n", "  id_watch_x:\n"),
        "source.id_watch_x",
        "unknown key",
        id="misspelt-section",
    ),
    pytest.param(
        GOOD.replace("  mode: id_watch\n", ""),
        "source",
        "source.id_watch is set but mode is binlog",
        id="id-watch-without-mode",
    ),
    pytest.param(
        GOOD.split("  id_watch:\n", maxsplit=1)[0],
        "source",
        "mode is id_watch but source.id_watch is missing",
        id="mode-without-id-watch",
    ),
    pytest.param(
        GOOD.replace("mode: id_watch", "mode: polling"),
        "source.mode",
        "'binlog' or 'id_watch'",
        id="unknown-mode",
    ),
    pytest.param(
        GOOD.replace("table: registry.app_revision", "table: app_revision"),
        "source.id_watch.tables[0].table",
        "must be `db.table`",
        id="table-without-db",
    ),
    pytest.param(
        GOOD.replace("list_interval_minutes: [10, 20]", "list_interval_minutes: [20, 10]"),
        "source.id_watch.list_interval_minutes",
        "0 < min <= max",
        id="interval-reversed",
    ),
    pytest.param(
        GOOD.replace(
            "        id_column: id\n        created_column: gmt_create\n        stab",
            "        created_column: gmt_create\n        stab",
        ),
        "source.id_watch.tables[0].id_column",
        "missing",
        id="missing-id-column",
    ),
    pytest.param(
        GOOD.replace("after_seconds: 86400", "after_seconds: 0"),
        "source.id_watch.tables[0].expire.after_seconds",
        "greater than 0",
        id="expire-after-zero",
    ),
    pytest.param(
        GOOD.replace("table: registry.interface_apps", "table: registry.app_revision"),
        "source.id_watch.tables",
        "listed twice",
        id="duplicate-table",
    ),
    pytest.param(
        GOOD.replace("    tables:\n", "    tables: []\n    old_tables:\n"),
        "source.id_watch.old_tables",
        "unknown key",
        id="unknown-key-in-id-watch",
    ),
]


@pytest.mark.parametrize(("text", "key", "problem"), BAD)
def test_bad_id_watch_config_names_file_and_key(
    conf: Path, text: str, key: str, problem: str
) -> None:
    path = write_destination(conf, "bad", text)
    loaded = load_config(conf, ENV)
    error = loaded.errors["bad"]
    assert isinstance(error, ConfigFileError)
    assert error.path == str(path)
    assert error.key == key
    assert problem in error.problem
