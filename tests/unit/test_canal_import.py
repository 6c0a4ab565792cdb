"""`import-canal`: Java properties parsing and the mapping of Canal's settings."""

from __future__ import annotations

import contextlib
import io
import re
import shutil
from pathlib import Path

import pytest
import yaml

from cdc_platform.cli import main
from cdc_platform.config import load_config
from cdc_platform.config.canal_import import import_canal, read_properties
from cdc_platform.errors import ConfigError

pytestmark = pytest.mark.unit

FIXTURE = Path(__file__).parent.parent / "fixtures" / "canal"


def canal_dir(tmp_path: Path, **instance: str) -> Path:
    """The fixture conf directory, with instance properties replaced or added."""
    target = tmp_path / "canal"
    shutil.copytree(FIXTURE, target)
    path = target / "example" / "instance.properties"
    text = path.read_text()
    for key, value in instance.items():
        name = f"canal.instance.{key}"
        text, count = re.subn(rf"(?m)^#? ?{re.escape(name)}\s*=.*$", f"{name}={value}", text)
        if not count:
            text += f"\n{name}={value}\n"
    path.write_text(text)
    return target


def test_properties_syntax() -> None:
    text = (
        "# comment\n! also a comment\n  a = 1 \nb:2\nc 3\nd=x\\\n    y\ne=\\u0041\\t\\\\.\\=\n"
        "f\\ g = h\nempty =\n"
    )
    assert read_properties(text) == {
        "a": "1 ",  # Java keeps a value's trailing blanks; the import trims where it reads
        "b": "2",
        "c": "3",
        "d": "xy",
        "e": "A\t\\.=",
        "f g": "h",
        "empty": "",
    }


def test_canal_example_imports_and_passes_config_check(tmp_path: Path) -> None:
    out = tmp_path / "conf"
    result = import_canal(canal_dir(tmp_path), out)
    assert result.errors == {}
    instance = yaml.safe_load((out / "destinations" / "example" / "instance.yaml").read_text())
    source = instance["source"]
    assert (source["host"], source["port"], source["user"]) == ("127.0.0.1", 3306, "canal")
    assert source["password_env"] == "CDC_EXAMPLE_PASSWORD"
    assert source["include_tables"] == [r"(?i).*\..*"]
    assert source["exclude_tables"] == [r"(?i)mysql\.slave_.*"]
    assert "resume_by" not in source
    assert instance["start"] == {"mode": "latest"}  # Canal's default: the current end
    assert instance["store"] == {
        "buffer_size": 8192,
        "memunit": 2048,
        "batch_mode": "ITEMSIZE",
        "ddl_isolation": True,
    }
    platform = yaml.safe_load((out / "platform.yaml").read_text())
    assert platform["lease"] == {"backend": "zookeeper", "hosts": "127.0.0.1:2181,127.0.0.1:2182"}
    every_key = [key for keys in result.not_imported.values() for key in keys]
    for key in ("canal.mq.topic", "canal.instance.tsdb.enable", "kafka.bootstrap.servers"):
        assert key in every_key
    for written in result.files:
        assert "canal-secret-pw" not in written.read_text()
    assert load_config(out).errors != {}  # config check wants the password variable set
    loaded = load_config(out, environ={"CDC_EXAMPLE_PASSWORD": "pw"})
    assert loaded.errors == {}
    filters = loaded.destinations["example"].config.source
    assert re.fullmatch(filters.include_tables[0], "Shop.Orders")
    assert re.fullmatch(filters.exclude_tables[0], "mysql.slave_relay_log_info")
    assert not re.fullmatch(filters.exclude_tables[0], "shop.orders")


def test_start_positions_map_to_start_modes(tmp_path: Path) -> None:
    cases = [
        (
            {"master.journal.name": "mysql-bin.000042", "master.position": "4711"},
            {"mode": "position", "file": "mysql-bin.000042", "pos": 4711},
        ),
        (
            {"master.timestamp": "1795341600250"},
            {"mode": "timestamp", "timestamp": "2026-11-22T10:00:00.250000Z"},
        ),
        ({"master.gtid": "0-1-42", "gtidon": "true"}, {"mode": "gtid", "gtid": "0-1-42"}),
        # Canal: the GTID counts only with gtidon=true, and then before a journal position
        (
            {
                "master.gtid": "0-1-42",
                "gtidon": "true",
                "master.journal.name": "mysql-bin.000002",
                "master.position": "4711",
            },
            {"mode": "gtid", "gtid": "0-1-42"},
        ),
        (
            {
                "master.gtid": "0-1-42",
                "master.journal.name": "mysql-bin.000002",
                "master.position": "4711",
            },
            {"mode": "position", "file": "mysql-bin.000002", "pos": 4711},
        ),
        ({"master.gtid": "0-1-42"}, {"mode": "latest"}),
        # a journal name without a position: its first event, offset 4
        (
            {"master.journal.name": "mysql-bin.000009"},
            {"mode": "position", "file": "mysql-bin.000009", "pos": 4},
        ),
        # a position without a journal name is ignored, as Canal ignores it
        ({"master.position": "4711"}, {"mode": "latest"}),
    ]
    for index, (props, start) in enumerate(cases):
        root = tmp_path / str(index)
        root.mkdir()
        out = root / "conf"
        result = import_canal(canal_dir(root, **props), out)
        assert result.errors == {}, props
        instance = yaml.safe_load((out / "destinations" / "example" / "instance.yaml").read_text())
        assert instance["start"] == start
        if "gtidon" in props:
            assert instance["source"]["resume_by"] == "gtid"


MYSQL_GTID = "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-42"


def _imported(tmp_path: Path, **props: str) -> tuple[dict[str, object], list[str]]:
    result = import_canal(canal_dir(tmp_path, **props), tmp_path / "conf")
    assert result.errors == {}, result.errors
    path = tmp_path / "conf" / "destinations" / "example" / "instance.yaml"
    return yaml.safe_load(path.read_text()), result.notes


def test_gtidon_with_a_mysql_gtid_writes_what_works_on_mysql(tmp_path: Path) -> None:
    """A GTID start and resume_by: gtid work on MariaDB only: for a MySQL GTID set the import
    resumes by file/position and starts at the position settings, saying so."""
    instance, notes = _imported(
        tmp_path,
        gtidon="true",
        **{
            "master.gtid": MYSQL_GTID,
            "master.journal.name": "mysql-bin.000002",
            "master.position": "4711",
        },
    )
    source = instance["source"]
    assert isinstance(source, dict)
    assert "resume_by" not in source  # file/position, the default
    assert instance["start"] == {"mode": "position", "file": "mysql-bin.000002", "pos": 4711}
    assert any("MySQL GTID set" in note and "MariaDB only" in note for note in notes)


def test_gtidon_with_only_a_mysql_gtid_is_refused_saying_what_to_set(tmp_path: Path) -> None:
    result = import_canal(
        canal_dir(tmp_path, gtidon="true", **{"master.gtid": MYSQL_GTID}), tmp_path / "conf"
    )
    assert result.destinations == {}
    error = result.errors["example"]
    assert "instance.properties line" in error
    assert "MariaDB only" in error
    assert "master.journal.name" in error
    assert "master.timestamp" in error


def test_gtidon_without_a_gtid_resumes_by_file_and_notes_mariadb(tmp_path: Path) -> None:
    instance, notes = _imported(tmp_path, gtidon="true")
    source = instance["source"]
    assert isinstance(source, dict)
    assert "resume_by" not in source
    assert instance["start"] == {"mode": "latest"}
    assert any("resume_by: gtid" in note and "MariaDB" in note for note in notes)


def test_bad_input_is_refused(tmp_path: Path) -> None:
    result = import_canal(canal_dir(tmp_path / "b", **{"master.address": "db"}), tmp_path / "o2")
    assert "host:port" in result.errors["example"]
    assert "instance.properties line" in result.errors["example"]
    assert result.destinations == {}
    with pytest.raises(ConfigError, match=r"canal\.properties"):
        import_canal(tmp_path / "nothing", tmp_path / "o3")


def test_cli_prints_what_it_did_without_secrets(tmp_path: Path) -> None:
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = main(["import-canal", str(canal_dir(tmp_path)), "--out", str(tmp_path / "conf")])
    text = printed.getvalue()
    assert code == 0, text
    assert "CDC_EXAMPLE_PASSWORD" in text
    assert "canal.mq.topic" in text
    assert "canal-secret-pw" not in text
    assert "4ACFE3202A5FF5CF" not in text  # values of unknown keys are never printed
