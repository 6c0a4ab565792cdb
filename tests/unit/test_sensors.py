"""The monitor sensors, evaluated with build_sensor_context against a real (temporary) instance."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from dagster import (
    AssetCheckEvaluation,
    AssetCheckSeverity,
    AssetKey,
    AssetObservation,
    DagsterInstance,
    DagsterRun,
    DagsterRunStatus,
    SensorResult,
    build_sensor_context,
)

from cdc_platform.config import load_config
from cdc_platform.config.monitor import diff_destinations
from dagster_defs.cdc_job import CDC_JOB, DESTINATION_TAG
from dagster_defs.resources import PlatformResource
from dagster_defs.sensors import Liveness, build_config_monitor, build_running_monitor

pytestmark = pytest.mark.unit

INSTANCE = """\
source:
  user: cdc
  password_env: CDC_SOURCE_PASSWORD
  server_id: {server_id}
"""


@pytest.fixture
def conf(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("CDC_SOURCE_PASSWORD", "x")
    root = tmp_path / "conf"
    (root / "destinations").mkdir(parents=True)
    return root


def put(conf: Path, name: str, text: str) -> None:
    (conf / "destinations" / name).mkdir(exist_ok=True)
    (conf / "destinations" / name / "instance.yaml").write_text(text)


def tick(sensor_def, instance: DagsterInstance, conf: Path, cursor: str | None) -> SensorResult:
    context = build_sensor_context(
        instance=instance,
        cursor=cursor,
        resources={"platform": PlatformResource(conf_dir=str(conf))},
    )
    result = sensor_def(context)
    assert isinstance(result, SensorResult)
    return result


def add_run(instance: DagsterInstance, destination: str, status: DagsterRunStatus) -> DagsterRun:
    run = DagsterRun(
        job_name=CDC_JOB,
        run_id=str(uuid.uuid4()),
        status=status,
        tags={DESTINATION_TAG: destination},
    )
    instance.add_run(run)
    return run


def requested(result: SensorResult) -> list[str]:
    return [r.tags[DESTINATION_TAG] for r in result.run_requests or []]


def test_config_monitor_start_reload_stop(instance: DagsterInstance, conf: Path) -> None:
    monitor = build_config_monitor()
    put(conf, "a", INSTANCE.format(server_id=1))
    put(conf, "b", INSTANCE.format(server_id=2))
    first = tick(monitor, instance, conf, None)
    assert requested(first) == ["a", "b"]
    assert first.run_requests is not None
    assert all(r.run_key is None for r in first.run_requests), "run keys are permanent: never used"
    assert (
        first.run_requests[0].run_config["ops"]["stream_destination"]["config"]["destination"]
        == "a"
    )

    # Nothing changed: nothing requested. A touch with the same content is not a change.
    put(conf, "a", INSTANCE.format(server_id=1))
    second = tick(monitor, instance, conf, first.cursor)
    assert requested(second) == []

    # Reload: the live run is cancelled and a new one requested in the same tick.
    run_a = add_run(instance, "a", DagsterRunStatus.STARTED)
    put(conf, "a", INSTANCE.format(server_id=11))
    third = tick(monitor, instance, conf, second.cursor)
    assert requested(third) == ["a"]
    cancelled = instance.get_run_by_id(run_a.run_id)
    assert cancelled is not None
    assert cancelled.status in (DagsterRunStatus.CANCELING, DagsterRunStatus.CANCELED)

    # Stop: directory removed -> its run is cancelled, nothing requested.
    run_b = add_run(instance, "b", DagsterRunStatus.STARTED)
    (conf / "destinations" / "b" / "instance.yaml").unlink()
    (conf / "destinations" / "b").rmdir()
    fourth = tick(monitor, instance, conf, third.cursor)
    assert requested(fourth) == []
    stopped = instance.get_run_by_id(run_b.run_id)
    assert stopped is not None
    assert stopped.status in (DagsterRunStatus.CANCELING, DagsterRunStatus.CANCELED)
    assert set(json.loads(fourth.cursor or "{}")["seen"]) == {"a"}


def test_config_monitor_invalid_config_keeps_the_others(
    instance: DagsterInstance, conf: Path
) -> None:
    monitor = build_config_monitor()
    put(conf, "good", INSTANCE.format(server_id=1))
    put(conf, "bad", INSTANCE.format(server_id=1) + "store: {buffer_size: 1000}\n")
    result = tick(monitor, instance, conf, None)
    assert requested(result) == ["good"]
    # The running good destination becomes invalid: its run keeps going on the last good config.
    run = add_run(instance, "good", DagsterRunStatus.STARTED)
    put(conf, "good", "source: {port: nope}\n")
    again = tick(monitor, instance, conf, result.cursor)
    assert requested(again) == []
    assert again.skip_reason is not None
    assert "instance.yaml" in str(again.skip_reason.skip_message)
    kept = instance.get_run_by_id(run.run_id)
    assert kept is not None
    assert kept.status == DagsterRunStatus.STARTED


def test_config_monitor_disabled_destination_stops(instance: DagsterInstance, conf: Path) -> None:
    monitor = build_config_monitor()
    put(conf, "a", INSTANCE.format(server_id=1))
    first = tick(monitor, instance, conf, None)
    run = add_run(instance, "a", DagsterRunStatus.STARTED)
    put(conf, "a", "enabled: false\n" + INSTANCE.format(server_id=1))
    second = tick(monitor, instance, conf, first.cursor)
    assert requested(second) == []
    after = instance.get_run_by_id(run.run_id)
    assert after is not None
    assert after.status != DagsterRunStatus.STARTED


def test_running_monitor_requests_missing_runs_only(instance: DagsterInstance, conf: Path) -> None:
    now = [1000.0]
    monitor = build_running_monitor(
        probe_factory=lambda _ctx: lambda *_: Liveness(True, "ok"),
        grace_seconds=30,
        clock=lambda: now[0],
    )
    put(conf, "a", INSTANCE.format(server_id=1))
    put(conf, "b", INSTANCE.format(server_id=2))
    add_run(instance, "a", DagsterRunStatus.STARTING)
    first = tick(monitor, instance, conf, None)
    assert requested(first) == [], "within the grace period the config monitor starts new ones"
    now[0] += 10
    assert requested(tick(monitor, instance, conf, first.cursor)) == []
    now[0] += 25
    result = tick(monitor, instance, conf, first.cursor)
    assert requested(result) == ["b"]
    assert result.run_requests is not None
    assert result.run_requests[0].run_key is None


def test_running_monitor_fails_an_orphaned_run_and_relaunches(
    instance: DagsterInstance, conf: Path
) -> None:
    monitor = build_running_monitor(
        probe_factory=lambda _ctx: lambda *_: Liveness(False, "lease expired"), grace_seconds=0
    )
    put(conf, "a", INSTANCE.format(server_id=1))
    orphan = add_run(instance, "a", DagsterRunStatus.STARTED)
    result = tick(monitor, instance, conf, None)
    assert requested(result) == ["a"]
    failed = instance.get_run_by_id(orphan.run_id)
    assert failed is not None
    assert failed.status == DagsterRunStatus.FAILURE


def test_heartbeat_probe_judges_by_newest_event(instance: DagsterInstance, conf: Path) -> None:
    """The default probe: a STARTED run whose newest event is too old is an orphan."""
    put(conf, "a", INSTANCE.format(server_id=1))
    (conf / "platform.yaml").write_text("dagster: {orphan_after_seconds: 3600}\n")
    run = add_run(instance, "a", DagsterRunStatus.STARTED)
    instance.report_engine_event("heartbeat", run)
    assert requested(tick(build_running_monitor(grace_seconds=0), instance, conf, None)) == []
    (conf / "platform.yaml").write_text("dagster: {orphan_after_seconds: 0.000001}\n")
    assert requested(tick(build_running_monitor(grace_seconds=0), instance, conf, None)) == ["a"]


def test_diff_ignores_mtime_and_reports_changes(conf: Path) -> None:
    put(conf, "a", INSTANCE.format(server_id=1))
    first = diff_destinations({}, load_config(conf))
    assert first.start == ["a"]
    assert diff_destinations(first.seen, load_config(conf)).empty


def test_running_monitor_observes_each_change_log(instance: DagsterInstance, conf: Path) -> None:
    """Its findings per destination become an observation of the change-log asset."""
    (conf / "platform.yaml").write_text(
        f"lease: {{backend: database, url: 'sqlite:///{conf}/l.db'}}\n"
    )
    put(conf, "a", INSTANCE.format(server_id=1))
    monitor = build_running_monitor(
        probe_factory=lambda _ctx: lambda *_: Liveness(True, "ok"), grace_seconds=3600
    )
    result = tick(monitor, instance, conf, None)
    observation, check = result.asset_events
    assert isinstance(observation, AssetObservation)
    assert observation.asset_key == AssetKey(["cdc", "a", "changes"])
    assert observation.metadata["holder"].value == "-"  # nobody holds the lease
    assert observation.metadata["live_runs"].value == 0
    # ... and, with no run live, it evaluates the change log's lag check itself (no lag
    # known: WARN)
    assert isinstance(check, AssetCheckEvaluation)
    assert check.check_name == "lag_within_budget"
    assert not check.passed
    assert check.severity == AssetCheckSeverity.WARN
    # the next tick, with the same verdict within a minute, records nothing (no flood)
    assert tick(monitor, instance, conf, result.cursor).asset_events == []
    # A live run evaluates the check with its own materializations: the monitor only
    # observes (a runless evaluation would hide the run's, "Not evaluated", issue 44.1).
    add_run(instance, "a", DagsterRunStatus.STARTING)
    (live,) = tick(monitor, instance, conf, None).asset_events
    assert isinstance(live, AssetObservation)
    assert live.metadata["live_runs"].value == 1
