"""Stop signals of `run`, `serve` and `snapshot`: a handler never takes a lock the main thread
may hold (it runs in the main thread, between two of its bytecodes)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from cdc_platform.config.instance import InstanceConfig
from cdc_platform.config.loader import load_config
from cdc_platform.config.source import SourceConfig
from cdc_platform.infra.signals import stop_signals
from cdc_platform.runtime.serve import ServeProcess
from cdc_platform.runtime.supervisor import LeaseSupervisor
from cdc_platform.sink.destination_lake import DestinationLake
from cdc_platform.sink.term import WriteTerm
from cdc_platform.testing.fakes import InMemoryLease, InMemoryLeaseStore
from cdc_platform.testing.processes import wait_for

pytestmark = [pytest.mark.unit, pytest.mark.timeout(60)]


def test_sigterm_while_the_main_thread_holds_the_supervisor_lock(tmp_path: Path) -> None:
    config = InstanceConfig(
        source=SourceConfig(user="cdc", password_env="CDC_TEST_PASSWORD", server_id=7)
    )
    lease = InMemoryLease(InMemoryLeaseStore(), "shop", address="a")
    supervisor = LeaseSupervisor(
        WriteTerm("shop", config, DestinationLake.at(tmp_path, "shop")), lease
    )
    before = signal.getsignal(signal.SIGTERM)
    with stop_signals(supervisor.request_stop):
        with supervisor._lock:  # the main thread is, say, installing the term's runtime
            os.kill(os.getpid(), signal.SIGTERM)  # the handler runs here, on this thread
            assert not supervisor._stop.is_set()  # acted on only once the lock is free
        wait_for(supervisor._stop.is_set, "the stop request")
    assert supervisor._stop_reason == "signal SIGTERM"
    assert signal.getsignal(signal.SIGTERM) is before


def test_sigterm_and_sighup_while_the_main_thread_holds_the_serve_runner_lock(
    tmp_path: Path,
) -> None:
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "platform.yaml").write_text(f"lake_root: {tmp_path / 'lake'}\n")
    server = ServeProcess(conf, load=lambda: load_config(conf))
    with stop_signals(server.request_stop, on_hup=server.rescan):
        with server.runner._lock:  # the main thread is, say, starting a destination
            os.kill(os.getpid(), signal.SIGHUP)
            os.kill(os.getpid(), signal.SIGTERM)
        wait_for(server._stop.is_set, "the stop request")
        wait_for(server._wake.is_set, "the rescan")
    assert server._stop_reason == "signal SIGTERM"
