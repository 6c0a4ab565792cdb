"""`decode_workers` is one budget per process: every binlog source of a process (serve runs
many destinations in one) shares one pool of decode worker processes."""

from __future__ import annotations

import os
import signal
import time

import pytest

from cdc_platform.source.stream.decode_pool import PROCESS_WORKERS, DecodePool

pytestmark = [pytest.mark.unit, pytest.mark.timeout(120)]


def wait_for_processes(count: int) -> None:
    deadline = time.monotonic() + 60
    while PROCESS_WORKERS.processes() != count:
        assert time.monotonic() < deadline, PROCESS_WORKERS.processes()
        time.sleep(0.05)


def test_forty_sources_share_one_pool_of_workers() -> None:
    pools = [DecodePool(2) for _ in range(40)]
    try:
        for pool in pools:
            pool.start()
        assert len({id(pool._executor) for pool in pools}) == 1
        wait_for_processes(2)  # not 80
    finally:
        for pool in pools[:-1]:
            pool.close()
    wait_for_processes(2)  # the last source still uses them
    pools[-1].close()
    assert PROCESS_WORKERS.processes() == 0


def test_a_broken_pool_is_replaced_for_the_sources_that_start_after() -> None:
    first = DecodePool(2)
    first.start()
    executor = first._executor
    assert executor is not None
    wait_for_processes(2)
    victim = next(iter(executor._processes))
    os.kill(victim, signal.SIGKILL)
    deadline = time.monotonic() + 60
    while not getattr(executor, "_broken", False):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    second = DecodePool(2)
    try:
        second.start()
        assert second._executor is not executor
    finally:
        first.close()
        second.close()
    assert PROCESS_WORKERS.processes() == 0
