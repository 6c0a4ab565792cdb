"""The Prometheus endpoint: its own registry per process, the series every destination has,
the lag from an injected clock, and the lease gauges flipping when the lease moves."""

from __future__ import annotations

import json
import math
import re
import threading
import urllib.request
from pathlib import Path

import pytest

from cdc_platform.config.platform import MetricsConfig
from cdc_platform.errors import ConfigError
from cdc_platform.runtime.instance import RunSummary
from cdc_platform.runtime.prometheus import PrometheusMetrics, open_metrics
from cdc_platform.runtime.supervisor import LeaseSupervisor
from cdc_platform.sink.destination_lake import DestinationLake
from cdc_platform.sink.term import WriteTerm
from cdc_platform.testing.fakes import FakeClock, InMemoryLease, InMemoryLeaseStore
from cdc_platform.testing.processes import wait_for
from tests.unit.test_lease_supervisor import CONFIG, FakeRuntime

pytestmark = pytest.mark.unit


def _value(metrics: PrometheusMetrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def test_two_processes_worth_of_metrics_do_not_share_series() -> None:
    one, two = PrometheusMetrics(), PrometheusMetrics()
    one.recorder("shop").committed(
        ops={"c": 3, "u": 1, "ddl": 1}, transactions=2, seconds=0.02, at=1000.0
    )
    two.recorder("shop")
    assert _value(one, "cdc_rows_committed_total", destination="shop", op="c") == 3
    assert _value(one, "cdc_rows_committed_total", destination="shop", op="ddl") == 1
    assert _value(one, "cdc_rows_committed_total", destination="shop", op="d") == 0
    assert _value(one, "cdc_transactions_committed_total", destination="shop") == 2
    assert _value(one, "cdc_commit_duration_seconds_count", destination="shop") == 1
    assert _value(one, "cdc_last_commit_timestamp_seconds", destination="shop") == 1000.0
    assert _value(two, "cdc_rows_committed_total", destination="shop", op="c") == 0


def test_lag_is_now_minus_the_committed_source_time() -> None:
    clock = FakeClock(wall=5000.0)
    metrics = PrometheusMetrics(clock=clock.time)
    recorder = metrics.recorder("shop")
    lag = _value(metrics, "cdc_source_lag_seconds", destination="shop")
    assert lag is not None
    assert math.isnan(lag), "no figure before the first commit or heartbeat"
    recorder.caught_up(4998.0)
    clock.advance(1.5)
    assert _value(metrics, "cdc_source_lag_seconds", destination="shop") == 3.5
    recorder.lease(held=False, epoch=4)
    recorder.caught_up(5001.0)  # the lost term's last heartbeat, reported late
    lag = _value(metrics, "cdc_source_lag_seconds", destination="shop")
    assert lag is not None
    assert math.isnan(lag), "a former holder reports no lag"
    assert _value(metrics, "cdc_lease_epoch", destination="shop") == 4


def test_the_endpoint_serves_the_text_format_on_a_free_port() -> None:
    metrics = PrometheusMetrics()
    metrics.recorder("shop").buffer(0.25)
    port = metrics.serve("127.0.0.1", 0)
    try:
        assert port > 0
        assert metrics.url == f"http://127.0.0.1:{port}/metrics"
        with urllib.request.urlopen(metrics.url, timeout=5) as response:
            text = response.read().decode()
        assert 'cdc_buffer_fill_ratio{destination="shop"} 0.25' in text
        with pytest.raises(ConfigError, match="cannot serve metrics"):
            PrometheusMetrics().serve("127.0.0.1", port)
    finally:
        metrics.close()


def test_open_metrics_serves_only_when_asked_and_any_port_for_a_dagster_run() -> None:
    assert open_metrics(MetricsConfig()) is None
    taken = PrometheusMetrics()
    port = taken.serve("127.0.0.1", 0)
    try:
        with pytest.raises(ConfigError):
            open_metrics(MetricsConfig(port=port))
        run = open_metrics(MetricsConfig(port=port), any_port=True)
        assert run is not None
        assert run.port not in (None, port)
        run.close()
    finally:
        taken.close()


def test_forget_drops_a_destinations_series() -> None:
    metrics = PrometheusMetrics()
    metrics.recorder("shop")
    metrics.recorder("crm")
    metrics.forget("shop")
    assert _value(metrics, "cdc_lease_held", destination="shop") is None
    assert _value(metrics, "cdc_lease_held", destination="crm") == 0


def test_the_lease_gauges_follow_the_lease_from_one_node_to_the_other(tmp_path: Path) -> None:
    layout = DestinationLake.at(tmp_path, "shop")
    store = InMemoryLeaseStore()
    nodes: list[tuple[LeaseSupervisor, PrometheusMetrics]] = []
    for address in ("a", "b"):
        metrics = PrometheusMetrics()
        lease = InMemoryLease(
            store, "shop", address=address, expiry=0.8, renew_interval=0.1, release_cooldown=5
        )
        term = WriteTerm("shop", CONFIG, layout, recorder=metrics.recorder("shop"))
        nodes.append((LeaseSupervisor(term, lease, runtime_factory=FakeRuntime), metrics))
    (a, a_metrics), (b, b_metrics) = nodes

    def held(metrics: PrometheusMetrics) -> float | None:
        return _value(metrics, "cdc_lease_held", destination="shop")

    results: list[RunSummary] = []
    FakeRuntime.instances.clear()
    threads = [threading.Thread(target=lambda s=s: results.append(s.run())) for s in (a, b)]
    threads[0].start()
    try:
        wait_for(lambda: held(a_metrics) == 1, "node a to hold the lease")
        threads[1].start()
        wait_for(lambda: b.role == "standby", "node b in standby")
        assert held(b_metrics) == 0
        assert _value(a_metrics, "cdc_lease_epoch", destination="shop") == 0
        a.request_stop("node a goes away")
        wait_for(lambda: held(b_metrics) == 1, "node b to take over")
        assert held(a_metrics) == 0
        assert _value(b_metrics, "cdc_lease_epoch", destination="shop") == 1
    finally:
        a.request_stop("test done")
        b.request_stop("test done")
        for thread in threads:
            if thread.is_alive() or thread.ident is not None:
                thread.join(timeout=30)


def _exported() -> tuple[set[str], set[str]]:
    """(sample names, metric names as documented: counters with ``_total``)."""
    metrics = PrometheusMetrics()
    metrics.recorder("shop").committed(ops={"c": 1}, transactions=1, seconds=0.1, at=1.0)
    families = list(metrics.registry.collect())
    samples = {s.name for family in families for s in family.samples}
    documented = {f.name + ("_total" if f.type == "counter" else "") for f in families}
    return samples, documented


def test_the_dashboard_and_the_docs_use_the_real_metric_names() -> None:
    root = Path(__file__).resolve().parents[2]
    samples, metrics = _exported()
    dashboard = json.loads((root / "docs/grafana/cdc-platform.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    used = {n for e in exprs for n in re.findall(r"\bcdc_[a-z_]+", e)}
    assert used, "the dashboard queries nothing"
    assert used <= samples, f"unknown in the dashboard: {sorted(used - samples)}"
    text = (root / "docs/operations.md").read_text()
    table = set(re.findall(r"^\| `(cdc_[a-z_]+)", text, re.MULTILINE))
    assert table == metrics, "docs/operations.md's table lists exactly the metrics served"
