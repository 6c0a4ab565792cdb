"""The long-lived op waits for the pipeline after a stop signal, whatever it interrupts (44.2).

Dagster raises the stop as DagsterExecutionInterruptedError from its SIGINT handler, at any
bytecode of the op's thread. Raised inside ``Thread.join``, CPython 3.11 marks the still
running thread as stopped, so an op that waited with join / is_alive stopped waiting at once
and the process ended under the in-flight commit.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from types import FrameType, SimpleNamespace
from typing import Any

import pytest
from dagster import DagsterExecutionInterruptedError

from cdc_platform.runtime import RunSummary
from cdc_platform.testing.processes import let_time_pass
from dagster_defs.cdc_job import _DeferredSignals, _supervise

pytestmark = pytest.mark.unit


class SlowSupervisor:
    """Stands in for the LeaseSupervisor: its run ends a while after a stop request."""

    name = "d"
    role = "active"
    runtime = None
    snapshot_progress = None

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.finished = threading.Event()

    def run(self) -> RunSummary:
        self.stop.wait()
        let_time_pass(1.0, because="the in-flight commit still runs at the second Ctrl-C")
        self.finished.set()
        return RunSummary("d", "stop requested", 1, 1, 1, None)

    def request_stop(self, reason: str) -> None:
        del reason
        self.stop.set()


class Reporter:
    asset_key = None
    min_interval = 0.0
    reported_at = 0.0

    def flush(self, *, force: bool) -> None:
        del force

    def current(self, lag: float | None, refresh_after: float) -> None:
        del lag, refresh_after


@pytest.fixture
def dagster_handler() -> Iterator[None]:
    """SIGINT raised as Dagster's execution interrupt, as inside a run's op."""

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise DagsterExecutionInterruptedError()

    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    signal.signal(signal.SIGINT, interrupt)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def test_a_stop_signal_waits_for_the_in_flight_commit(dagster_handler: None) -> None:
    supervisor = SlowSupervisor()
    tags: dict[str, str] = {}
    instance = SimpleNamespace(
        add_run_tags=lambda run_id, new: tags.update(new),
        get_run_by_id=lambda run_id: None,
    )
    context: Any = SimpleNamespace(
        instance=instance, run_id="r", log=SimpleNamespace(info=lambda msg: None)
    )
    # Ctrl-C, then again while the commit finishes (only SIGKILL may cut it short)
    for delay in (0.3, 0.8):
        threading.Timer(delay, os.kill, (os.getpid(), signal.SIGINT)).start()
    summary = _supervise(
        context,
        supervisor,
        Reporter(),
        heartbeat_every=60.0,
        refresh_after=60.0,
        signals=_DeferredSignals(),
    )
    assert supervisor.finished.is_set(), "returned before the pipeline finished its commit"
    assert summary is not None
    assert summary.reason == "stop requested"
    assert tags == {"cdc/stopped": "requested"}
