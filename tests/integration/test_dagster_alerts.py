"""Operating the plugin: the run-failure alert posts to a real (local) webhook; the change
log's lag check judges the newest materialization against the destination's budget; the
commit reports carry rows per second."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest
from dagster import (
    AssetCheckEvaluation,
    AssetCheckKey,
    AssetCheckSeverity,
    AssetKey,
    AssetMaterialization,
    AssetSelection,
    DagsterEventType,
    DagsterInstance,
    Definitions,
    Failure,
    build_run_status_sensor_context,
    define_asset_job,
    instance_for_test,
    job,
    op,
)

from cdc_platform.coordination.table_catalog import Catalog
from dagster_defs import build_definitions
from dagster_defs.alerts import WEBHOOK_ENV, build_run_failure_alert, post_alert
from dagster_defs.freshness import LAG_CHECK

pytestmark = pytest.mark.integration


class Webhook:
    """A tiny HTTP server that keeps every JSON body posted to it."""

    def __init__(self, status: int = 200) -> None:
        received: list[dict[str, Any]] = []
        self.received = received

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers["Content-Length"])
                received.append(json.loads(self.rfile.read(length)))
                self.send_response(status)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = HTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def webhook() -> Iterator[Webhook]:
    hook = Webhook()
    yield hook
    hook.close()


@op
def broken() -> None:
    raise Failure(description="source unreachable")


@job(tags={"cdc/destination": "shop"})
def cdc_destination() -> None:
    broken()


def failed_run_context(instance: DagsterInstance) -> Any:
    result = cdc_destination.execute_in_process(instance=instance, raise_on_error=False)
    assert not result.success
    records = instance.get_records_for_run(
        result.run_id, of_type=DagsterEventType.RUN_FAILURE
    ).records
    (record,) = records
    assert record.event_log_entry.dagster_event is not None
    return build_run_status_sensor_context(
        sensor_name="cdc_run_failure_alert",
        dagster_event=record.event_log_entry.dagster_event,
        dagster_instance=instance,
        dagster_run=result.dagster_run,
    ).for_run_failure()


def test_a_failed_run_is_posted_to_the_webhook(
    webhook: Webhook, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(WEBHOOK_ENV, webhook.url)
    sensor = build_run_failure_alert()
    with instance_for_test() as instance:
        context = failed_run_context(instance)
        sensor(context)
    (posted,) = webhook.received
    assert posted["job"] == "cdc_destination"
    assert posted["tags"]["cdc/destination"] == "shop"
    assert "of destination shop failed" in posted["text"]
    assert posted["run_id"] == context.dagster_run.run_id


def test_a_failure_is_alerted_once_and_an_old_one_not_at_all(
    webhook: Webhook, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sensor's cursor can go back (its state reset, a tick replayed at the next start):
    a failure already alerted is not posted again, and one that ended long before the sensor
    saw it is logged, not posted."""
    monkeypatch.setenv(WEBHOOK_ENV, webhook.url)
    with instance_for_test() as instance:
        context = failed_run_context(instance)
        build_run_failure_alert()(context)
        again = build_run_status_sensor_context(
            sensor_name="cdc_run_failure_alert",
            dagster_event=context.failure_event,
            dagster_instance=instance,
            dagster_run=instance.get_run_by_id(context.dagster_run.run_id),
        ).for_run_failure()
        build_run_failure_alert()(again)
        assert len(webhook.received) == 1
        build_run_failure_alert(max_age_seconds=0.0)(failed_run_context(instance))
    assert len(webhook.received) == 1


def test_without_the_variable_nothing_is_posted(
    webhook: Webhook, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(WEBHOOK_ENV, raising=False)
    with instance_for_test() as instance:
        build_run_failure_alert()(failed_run_context(instance))
    assert webhook.received == []


def test_an_unreachable_or_refusing_webhook_is_reported_not_raised() -> None:
    refusing = Webhook(status=500)
    try:
        assert post_alert(refusing.url, {"text": "x"}) == "webhook answered HTTP 500"
    finally:
        refusing.close()
    problem = post_alert(refusing.url, {"text": "x"}, timeout=2.0)  # closed now
    assert problem is not None
    assert problem.startswith("webhook not reached")
    assert "127.0.0.1" not in problem.split(":", 1)[0]


def test_lag_check_judges_the_newest_materialization_against_the_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CDC_SOURCE_PASSWORD", "unused")
    conf = tmp_path / "conf"
    (conf / "destinations" / "shop").mkdir(parents=True)
    (conf / "platform.yaml").write_text(f"lake_root: {tmp_path / 'lake'}\n")
    (conf / "destinations" / "shop" / "instance.yaml").write_text(
        "lag_budget_seconds: 60\n"
        "source: {user: cdc, password_env: CDC_SOURCE_PASSWORD, server_id: 7}\n"
    )
    defs = build_definitions(str(conf), catalogs={"shop": Catalog("shop")})
    changes = AssetKey(["cdc", "shop", "changes"])
    check_key = AssetCheckKey(changes, LAG_CHECK)
    lag_job = define_asset_job("lag", selection=AssetSelection.checks(check_key))
    runnable = Definitions.merge(defs, Definitions(jobs=[lag_job])).resolve_job_def("lag")

    def evaluate(instance: DagsterInstance) -> AssetCheckEvaluation:
        (evaluation,) = runnable.execute_in_process(instance=instance).get_asset_check_evaluations()
        return evaluation

    with instance_for_test() as instance:
        first = evaluate(instance)
        assert not first.passed
        assert first.severity == AssetCheckSeverity.WARN  # nothing committed yet
        instance.report_runless_asset_event(
            AssetMaterialization(changes, metadata={"lag_seconds": 12.5, "rows_per_second": 3.0})
        )
        ok = evaluate(instance)
        assert ok.passed
        assert ok.metadata["lag_seconds"].value == 12.5
        instance.report_runless_asset_event(
            AssetMaterialization(changes, metadata={"lag_seconds": 75.0})
        )
        late = evaluate(instance)
        assert not late.passed
        assert late.severity == AssetCheckSeverity.ERROR
        assert "over the budget of 60 s" in (late.description or "")
