"""The snapshot's read ahead: one read in a thread, its result or error taken by the caller."""

from __future__ import annotations

import threading

import pytest

from cdc_platform.backfill.read_ahead import ReadAhead

pytestmark = pytest.mark.unit


def test_nothing_started_takes_none() -> None:
    assert ReadAhead[int]().take() is None


def test_the_result_is_taken_once_in_the_callers_thread() -> None:
    ahead: ReadAhead[tuple[int, str]] = ReadAhead()
    threads: list[str] = []

    def read() -> tuple[int, str]:
        threads.append(threading.current_thread().name)
        return 7, "rows"

    ahead.start(read)
    assert ahead.take() == (7, "rows")
    assert threads[0].startswith("snapshot-read-ahead"), "the read ran in its own thread"
    assert ahead.take() is None, "taken once"
    ahead.start(read)
    assert ahead.take() == (7, "rows")
    assert threads[1] == threads[0], "one worker thread for every read"
    ahead.close()


def test_an_error_of_the_read_is_raised_by_take() -> None:
    ahead: ReadAhead[int] = ReadAhead()

    def read() -> int:
        raise ConnectionError("cut")

    ahead.start(read)
    with pytest.raises(ConnectionError, match="cut"):
        ahead.take()
    assert ahead.take() is None


def test_only_one_read_runs_ahead() -> None:
    ahead: ReadAhead[int] = ReadAhead()
    release = threading.Event()
    ahead.start(lambda: int(release.wait(30)))
    with pytest.raises(RuntimeError, match="already running"):
        ahead.start(lambda: 2)
    release.set()
    assert ahead.take() == 1


def test_discard_waits_for_the_running_read_and_drops_its_outcome() -> None:
    ahead: ReadAhead[int] = ReadAhead()
    release = threading.Event()
    finished = threading.Event()

    def read() -> int:
        release.wait(30)
        finished.set()
        raise ValueError("dropped")

    ahead.start(read)
    release.set()
    ahead.discard()
    assert finished.is_set(), "discard returned only after the read ended"
    assert ahead.take() is None
    ahead.start(lambda: 3)
    assert ahead.take() == 3, "a new read can start after a discard"
    ahead.close()
    ahead.start(lambda: 4)
    assert ahead.take() == 4, "and after a close (a new worker)"
    ahead.close()
