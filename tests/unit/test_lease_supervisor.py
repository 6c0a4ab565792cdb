"""The lease supervisor: commit gate, epoch claim, standby loop; in-memory lease, local Delta."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cdc_platform.config.instance import InstanceConfig
from cdc_platform.config.source import SourceConfig
from cdc_platform.errors import LeaseLostError, SinkError, StaleSideFileError
from cdc_platform.events import ResumePosition
from cdc_platform.runtime.claim import claim_change_log
from cdc_platform.runtime.holder_status import StatusChannels
from cdc_platform.runtime.instance import RunSummary
from cdc_platform.runtime.lease_gate import LeaseGate
from cdc_platform.runtime.runtime_metrics import RuntimeMetrics
from cdc_platform.runtime.supervisor import LeaseSupervisor
from cdc_platform.sink import DeltaChangeLog, FencedCommitError
from cdc_platform.sink.destination_lake import DestinationLake
from cdc_platform.sink.term import WriteTerm
from cdc_platform.testing.fakes import FakeClock, InMemoryLease, InMemoryLeaseStore
from cdc_platform.testing.processes import wait_for
from cdc_platform.watch import MemoryStateStore, StatePublisher

pytestmark = pytest.mark.unit

RESUME = ResumePosition("mysql-bin.000001", 4)
CONFIG = InstanceConfig(
    source=SourceConfig(user="cdc", password_env="CDC_TEST_PASSWORD", server_id=7)
)


def supervisor(lease: InMemoryLease, layout: DestinationLake, **kwargs: Any) -> LeaseSupervisor:
    return LeaseSupervisor(WriteTerm("shop", CONFIG, layout), lease, **kwargs)


def test_gate_passes_while_held_and_raises_once_lost(tmp_path: Path) -> None:
    clock = FakeClock()
    lease = InMemoryLease(InMemoryLeaseStore(clock), "shop", address="a", expiry=3.0)
    gate = LeaseGate("shop", lease, threading.Event())
    assert lease.try_acquire() == 0
    gate()
    clock.advance(3.0)
    with pytest.raises(LeaseLostError):
        gate()


def test_claim_fences_off_the_previous_epoch(tmp_path: Path) -> None:
    layout = DestinationLake.at(tmp_path, "shop")
    uri = layout.change_log
    old = DeltaChangeLog(uri, "shop")
    old.commit((), batch_seq=1, resume=RESUME, epoch=0)
    clock = FakeClock()
    lease = InMemoryLease(InMemoryLeaseStore(clock), "shop", address="b")
    assert lease.try_acquire(min_epoch=1) == 1
    claim_change_log(
        WriteTerm("shop", CONFIG, layout), 1, gate=LeaseGate("shop", lease, threading.Event())
    )
    checkpoint = DeltaChangeLog(uri, "shop").recover()
    assert checkpoint is not None
    assert (checkpoint.batch_seq, checkpoint.epoch, checkpoint.resume) == (2, 1, RESUME)
    with pytest.raises(FencedCommitError) as refused:
        old.commit((), batch_seq=3, resume=RESUME, epoch=0)  # the paused old holder wakes up
    assert refused.value.table_epoch == 1


def test_claim_refuses_an_epoch_older_than_the_table(tmp_path: Path) -> None:
    layout = DestinationLake.at(tmp_path, "shop")
    uri = layout.change_log
    DeltaChangeLog(uri, "shop").commit((), batch_seq=1, resume=RESUME, epoch=5)
    lease = InMemoryLease(InMemoryLeaseStore(FakeClock()), "shop", address="b")
    assert lease.try_acquire() == 0
    with pytest.raises(LeaseLostError, match="epoch 5"):
        claim_change_log(
            WriteTerm("shop", CONFIG, layout), 0, gate=LeaseGate("shop", lease, threading.Event())
        )


class FakeRuntime:
    """Stands in for DestinationRuntime: commits empty batches through the gate until stopped."""

    instances: list[FakeRuntime] = []

    def __init__(self, term: WriteTerm) -> None:
        assert term.epoch is not None
        assert term.commit_gate is not None
        self.name = term.destination
        self.epoch: int = term.epoch
        self.gate: Callable[[], None] = term.commit_gate
        self.sink = DeltaChangeLog(term.layout.change_log, term.destination)
        self._stop = threading.Event()
        self.reason = "stop requested"
        self.commits = 0
        FakeRuntime.instances.append(self)

    def request_stop(self, reason: str = "stop requested") -> None:
        self.reason = reason
        self._stop.set()

    def metrics(self) -> RuntimeMetrics:
        return RuntimeMetrics(self.name, state="running", batches_total=self.commits)

    def run(self, *, exit_when_idle_seconds: float | None = None) -> RunSummary:
        checkpoint = self.sink.recover()
        batch = checkpoint.batch_seq if checkpoint else 0
        while not self._stop.wait(0.02):
            try:
                self.gate()
            except LeaseLostError as exc:
                return RunSummary(self.name, "failed", self.commits, 0, batch, RESUME, exc)
            batch += 1
            self.sink.commit((), batch_seq=batch, resume=RESUME, epoch=self.epoch)
            self.commits += 1
        return RunSummary(self.name, self.reason, self.commits, 0, batch, RESUME)


def test_operator_release_sends_the_holder_back_to_standby_and_epochs_grow(
    tmp_path: Path,
) -> None:
    layout = DestinationLake.at(tmp_path, "shop")
    uri = layout.change_log
    store = InMemoryLeaseStore()
    state = MemoryStateStore()
    publisher = StatePublisher(state, interval=0.05)
    lease = InMemoryLease(
        store, "shop", address="a", expiry=0.8, renew_interval=0.1, release_cooldown=0.3
    )
    FakeRuntime.instances.clear()
    sup = supervisor(
        lease, layout, runtime_factory=FakeRuntime, channels=StatusChannels(publisher=publisher)
    )
    result: list[RunSummary] = []
    thread = threading.Thread(target=lambda: result.append(sup.run()), daemon=True)
    thread.start()
    try:
        wait_for(
            lambda: bool(FakeRuntime.instances) and FakeRuntime.instances[0].commits > 2, "commits"
        )
        other = InMemoryLease(store, "shop", address="ops")
        asked = other.request_release()
        assert asked is not None
        assert asked.address == "a"
        wait_for(lambda: len(FakeRuntime.instances) == 2, "a second term after the cool-down")
        wait_for(lambda: FakeRuntime.instances[1].commits > 2, "commits of the second term")
        assert "operator" in FakeRuntime.instances[0].reason
        assert [r.epoch for r in FakeRuntime.instances] == [0, 1]
    finally:
        sup.request_stop("test done")
        thread.join(timeout=30)
    assert result
    assert result[0].error is None
    assert result[0].reason == "test done"
    assert sup.terms == 2
    assert store.live("shop") is None, "released on exit"
    rows = DeltaChangeLog(uri, "shop").recover()
    assert rows is not None
    assert rows.epoch == 1
    publisher.close()
    entry = state.get("lease/shop")
    assert entry is not None
    assert '"state": "released"' in entry.value


class RefusedSideFileRuntime(FakeRuntime):
    """Its first term ends as a paused old holder's does: a side file refused its write."""

    def run(self, *, exit_when_idle_seconds: float | None = None) -> RunSummary:
        if len(FakeRuntime.instances) == 1:
            refused = StaleSideFileError("_snapshot_state.json: a newer term wrote it")
            return RunSummary(self.name, "failed", 0, 0, 0, RESUME, refused)
        return super().run(exit_when_idle_seconds=exit_when_idle_seconds)


def test_a_refused_side_file_write_sends_the_holder_back_to_standby(tmp_path: Path) -> None:
    """Fenced off by a side file, the holder lets its lease go and contends again (a newer
    term wrote the file), instead of ending the process as if the run had failed."""
    lease = InMemoryLease(
        InMemoryLeaseStore(), "shop", address="a", renew_interval=0.1, release_cooldown=0.0
    )
    FakeRuntime.instances.clear()
    sup = supervisor(
        lease, DestinationLake.at(tmp_path, "shop"), runtime_factory=RefusedSideFileRuntime
    )
    result: list[RunSummary] = []
    thread = threading.Thread(target=lambda: result.append(sup.run()), daemon=True)
    thread.start()
    try:
        wait_for(lambda: len(FakeRuntime.instances) == 2, "a second term")
    finally:
        sup.request_stop("test done")
        thread.join(timeout=30)
    assert result[0].reason == "test done"
    assert [r.epoch for r in FakeRuntime.instances] == [0, 1]


class LakeDownOnce(FakeRuntime):
    """The first runtime of a term finds the change log unreachable at its recovery."""

    def run(self, *, exit_when_idle_seconds: float | None = None) -> RunSummary:
        if len(FakeRuntime.instances) == 1:
            error = SinkError("cannot reach the lake (connection refused)")
            return RunSummary(self.name, "failed", 0, 0, 0, None, error)
        return super().run(exit_when_idle_seconds=exit_when_idle_seconds)


def test_a_transient_error_at_the_term_start_is_retried_while_the_lease_is_held(
    tmp_path: Path,
) -> None:
    lease = InMemoryLease(InMemoryLeaseStore(), "shop", address="a", renew_interval=0.1)
    FakeRuntime.instances.clear()
    sup = supervisor(lease, DestinationLake.at(tmp_path, "shop"), runtime_factory=LakeDownOnce)
    result: list[RunSummary] = []
    thread = threading.Thread(target=lambda: result.append(sup.run()), daemon=True)
    thread.start()
    try:
        wait_for(lambda: len(FakeRuntime.instances) == 2, "a second runtime in the same term")
        wait_for(lambda: FakeRuntime.instances[1].commits > 0, "commits after the retry")
        assert [r.epoch for r in FakeRuntime.instances] == [0, 0]
        assert sup.terms == 1
    finally:
        sup.request_stop("test done")
        thread.join(timeout=30)
    assert result[0].error is None
    assert result[0].reason == "test done"


def test_a_stop_ends_the_wait_of_a_retry_at_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    slow = CONFIG.model_copy(
        update={"source": CONFIG.source.model_copy(update={"reconnect_initial_seconds": 3600})}
    )
    lease = InMemoryLease(InMemoryLeaseStore(), "shop", address="a", renew_interval=0.1)
    FakeRuntime.instances.clear()
    sup = LeaseSupervisor(
        WriteTerm("shop", slow, DestinationLake.at(tmp_path, "shop")),
        lease,
        runtime_factory=LakeDownOnce,
    )
    result: list[RunSummary] = []
    thread = threading.Thread(target=lambda: result.append(sup.run()), daemon=True)
    thread.start()
    wait_for(lambda: "retrying in 3600.0 s" in caplog.text, "the retry's wait")
    sup.request_stop("test done")
    thread.join(timeout=30)
    assert not thread.is_alive()
    assert result[0].error is None
    assert result[0].reason == "test done"
    assert len(FakeRuntime.instances) == 1
