"""`cdc-platform config check` catches, before anything runs, the mistakes that would otherwise
show only later: repeated keys, clashing replica ids, lake_root typos, an empty conf directory,
a password where its variable's name belongs."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest

from cdc_platform.cli import main
from cdc_platform.config import load_config

pytestmark = pytest.mark.unit

SOURCE = """\
source:
  host: {host}
  port: 3306
  user: cdc
  password_env: {env}
  server_id: {server_id}
"""


def destination(conf: Path, name: str, **values: object) -> Path:
    settings: dict[str, object] = {"host": "db.internal", "env": "CDC_PW", "server_id": 1001}
    settings.update(values)
    path = conf / "destinations" / name / "instance.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(SOURCE.format(**settings))
    return path


def check(conf: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[int, str]:
    """Exit code and everything printed (stdout, then stderr)."""
    monkeypatch.setenv("CDC_PW", "x")
    printed, errors = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(errors):
        code = main(["config", "check", "--conf", str(conf)])
    return code, printed.getvalue() + errors.getvalue()


def test_an_empty_conf_directory_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    code, text = check(tmp_path, monkeypatch)
    assert code == 1
    assert text.startswith("ERROR no destinations under")


def test_one_replica_id_on_one_server_twice_is_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    destination(tmp_path, "orders", host="db.internal")
    destination(tmp_path, "billing", host="DB.internal")
    destination(tmp_path, "elsewhere", host="other.internal")
    code, text = check(tmp_path, monkeypatch)
    assert code == 1, text
    lines = text.splitlines()
    assert any(line.startswith("orders: ERROR") for line in lines)
    assert any(line.startswith("billing: ERROR") for line in lines)
    assert "source.server_id 1001 is also used by orders on DB.internal:3306" in text
    assert any(line.startswith("elsewhere: OK") for line in lines)


def test_loopback_names_are_one_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    destination(tmp_path, "a", host="localhost")
    destination(tmp_path, "b", host="127.0.0.1")
    code, text = check(tmp_path, monkeypatch)
    assert code == 1
    assert "also used by a on 127.0.0.1:3306" in text


def test_a_repeated_key_names_the_file_and_both_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = destination(tmp_path, "orders")
    path.write_text(path.read_text() + "source:\n  host: other\n")
    code, text = check(tmp_path, monkeypatch)
    assert code == 1
    assert f"orders: ERROR {path}" in text
    assert "key 'source' appears twice in one mapping (lines 1 and 7)" in text


def test_a_repeated_nested_key_is_an_error_too(tmp_path: Path) -> None:
    path = destination(tmp_path, "orders")
    path.write_text(path.read_text() + "  server_id: 7\n")
    error = load_config(tmp_path, {"CDC_PW": "x"}).errors["orders"]
    assert "key 'server_id' appears twice" in str(error)


@pytest.mark.parametrize(
    "root",
    ["s3:/bucket/lake", "s3:bucket", "~/lake", "~", "s3://AKIAEXAMPLE:hunter2secret@bucket/x"],
)
def test_lake_root_typos_are_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, root: str
) -> None:
    (tmp_path / "platform.yaml").write_text(f"lake_root: '{root}'\n")
    destination(tmp_path, "orders")
    code, text = check(tmp_path, monkeypatch)
    assert code != 0
    assert "platform.yaml: lake_root: " in text
    assert "hunter2secret" not in text
    assert not any(tmp_path.glob("s3:*"))
    assert not (tmp_path / "~").exists()


@pytest.mark.parametrize("value", ["Tr0ub4dor3xyz", "myLongPassw0rd"])
def test_a_password_in_password_env_is_never_echoed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    destination(tmp_path, "orders", env=value)
    code, text = check(tmp_path, monkeypatch)
    assert code == 1
    assert value not in text
    assert "password_env takes the NAME of a variable" in text


def test_a_conventional_variable_name_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    destination(tmp_path, "orders", env="CDC_ORDERS_PASSWORD")
    code, text = check(tmp_path, monkeypatch)
    assert code == 1
    assert "environment variable CDC_ORDERS_PASSWORD is not set" in text
