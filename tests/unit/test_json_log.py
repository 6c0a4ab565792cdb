"""`--log-format json`: one JSON object per line with the destination and the extra fields."""

from __future__ import annotations

import json
import logging

import pytest

from cdc_platform.infra.json_log import JsonFormatter

pytestmark = pytest.mark.unit


def _record(msg: str, *args: object, **extra: object) -> logging.LogRecord:
    record = logging.LogRecord("cdc_platform.runtime", logging.INFO, __file__, 1, msg, args, None)
    record.__dict__.update(extra)
    return record


def test_one_object_per_line_with_destination_event_and_extras() -> None:
    formatter = JsonFormatter("shop")
    line = formatter.format(
        _record(
            "%s: resuming after batch %d\nat %s",
            "crm",
            7,
            "mysql-bin.000002:4",
            position="mysql-bin.000002:4",
            epoch=3,
            batch_seq=7,
        )
    )
    assert "\n" not in line
    data = json.loads(line)
    assert data["destination"] == "crm", "the message's own destination wins"
    assert data["event"] == "crm: resuming after batch 7\nat mysql-bin.000002:4"
    assert (data["position"], data["epoch"], data["batch_seq"]) == ("mysql-bin.000002:4", 3, 7)
    assert data["level"] == "info"
    assert data["logger"] == "cdc_platform.runtime"
    assert data["ts"].endswith("+00:00")


def test_a_record_without_a_destination_gets_the_runs() -> None:
    data = json.loads(JsonFormatter("shop").format(_record("reading the binlog from %s", "x:4")))
    assert data["destination"] == "shop"
    assert "epoch" not in data
