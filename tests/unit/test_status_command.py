"""`cdc-platform status` without the source passwords, and with destinations that do not load:
it reads only the lease store, the lake and the state watch."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest

from cdc_platform.cli import main
from cdc_platform.testing.destinations import sqlite_lease

pytestmark = pytest.mark.unit


def test_status_needs_no_source_password_and_lists_broken_destinations(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    conf = tmp_path / "conf"
    (conf / "platform.yaml").parent.mkdir(parents=True)
    (conf / "platform.yaml").write_text(
        f"lake_root: {tmp_path / 'lake'}\n" + sqlite_lease(tmp_path)
    )
    for name, text in {
        "good": "source: {user: cdc, password_env: CDC_UNSET_PASSWORD, server_id: 7}\n",
        "broken": "source: {user: cdc, server_id: [}\n",
    }.items():
        (conf / "destinations" / name).mkdir(parents=True)
        (conf / "destinations" / name / "instance.yaml").write_text(text)
    monkeypatch.delenv("CDC_UNSET_PASSWORD", raising=False)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = main(["status", "--conf", str(conf), "--json"])
    statuses = {s["destination"]: s for s in json.loads(printed.getvalue())}
    assert code == 1  # the broken one
    assert sorted(statuses) == ["broken", "good"]
    assert statuses["good"]["errors"] == []
    assert statuses["broken"]["errors"][0].startswith("config: ")
    assert "not valid YAML" in statuses["broken"]["errors"][0]
