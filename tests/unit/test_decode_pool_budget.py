"""`decode_workers` is one budget per process: every binlog source of a process (serve runs
many destinations in one) shares one pool of decode worker processes."""

from __future__ import annotations

import os
import signal

import pytest

from cdc_platform.source.stream.decode_pool import PROCESS_WORKERS, DecodePool, WorkerPool
from cdc_platform.testing.processes import wait_for

pytestmark = [pytest.mark.unit, pytest.mark.timeout(120)]


def wait_for_processes(count: int) -> None:
    wait_for(
        lambda: PROCESS_WORKERS.processes() == count,
        f"{count} decode worker processes",
        diagnose=lambda: f"{PROCESS_WORKERS.processes()} running",
    )


def _workers(pool: DecodePool) -> WorkerPool:
    workers = pool.worker_pool()
    assert workers is not None, "the source has not joined the workers"
    return workers


def test_forty_sources_share_one_pool_of_workers() -> None:
    pools = [DecodePool(2) for _ in range(40)]
    try:
        for pool in pools:
            pool.start()
        wait_for_processes(2)  # not 80
        assert len({id(_workers(pool).executor) for pool in pools}) == 1
    finally:
        for pool in pools[:-1]:
            pool.close()
    wait_for_processes(2)  # the last source still uses them
    pools[-1].close()
    assert PROCESS_WORKERS.processes() == 0


def test_a_broken_pool_is_replaced_for_the_sources_that_start_after() -> None:
    first = DecodePool(2)
    first.start()
    wait_for_processes(2)
    workers = _workers(first)
    os.kill(workers.pids()[0], signal.SIGKILL)
    wait_for(workers.broken, "the pool to break after its worker was killed")
    second = DecodePool(2)
    try:
        second.start()
        assert _workers(second).executor is not workers.executor
    finally:
        first.close()
        second.close()
    assert PROCESS_WORKERS.processes() == 0
