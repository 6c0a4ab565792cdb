"""``CdcHook``: where the conf directory and the source password come from (no servers)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cdc_airflow.hooks import CdcHook
from cdc_platform.errors import ConfigError

pytestmark = pytest.mark.unit

SECRET = "s3cret-only-in-the-connection"


def _conf(tmp_path: Path) -> Path:
    conf = tmp_path / "conf"
    (conf / "destinations" / "shop").mkdir(parents=True)
    (conf / "platform.yaml").write_text(f"lake_root: {tmp_path / 'lake'}\n")
    (conf / "destinations" / "shop" / "instance.yaml").write_text(
        "source: {host: 127.0.0.1, port: 3306, user: cdc, password_env: HOOK_TEST_PASSWORD, "
        "server_id: 7}\n"
    )
    return conf


def _connection(monkeypatch: pytest.MonkeyPatch, **fields: object) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_CDC_TEST", json.dumps({"conn_type": "cdc_platform", **fields}))


def test_the_connection_password_makes_the_destination_valid(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    conf = _conf(tmp_path)
    monkeypatch.setenv("HOOK_TEST_PASSWORD", "")  # so that the hook's export is undone
    monkeypatch.delenv("HOOK_TEST_PASSWORD")
    _connection(monkeypatch, extra={"conf_dir": str(conf)})
    assert "shop" in CdcHook("cdc_test").load().errors  # no password anywhere: not valid
    _connection(
        monkeypatch,
        password=SECRET,
        extra={"conf_dir": str(conf), "password_env": "HOOK_TEST_PASSWORD"},
    )
    configset = CdcHook("cdc_test").load()
    assert list(configset.destinations) == ["shop"]
    assert SECRET not in repr(configset)


def test_a_password_without_password_env_is_refused_without_showing_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _connection(monkeypatch, password=SECRET, extra={"conf_dir": str(_conf(tmp_path))})
    with pytest.raises(ConfigError, match="password_env") as caught:
        CdcHook("cdc_test").load()
    assert SECRET not in str(caught.value)


def test_without_a_connection_the_conf_dir_comes_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CDC_CONF_DIR", str(tmp_path / "elsewhere"))
    assert CdcHook("cdc_absent").conf_dir() == tmp_path / "elsewhere"
    monkeypatch.delenv("CDC_CONF_DIR")
    with pytest.raises(ConfigError, match="no conf directory"):
        CdcHook("cdc_absent").conf_dir()
