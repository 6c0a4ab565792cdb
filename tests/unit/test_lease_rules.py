"""Canal's running-node rules (ZooKeeper backend) as pure logic, on a fake clock."""

from __future__ import annotations

import pytest

from cdc_platform.ha.running_node import RunningData, SwitchRules
from cdc_platform.testing.fakes import FakeClock

pytestmark = pytest.mark.unit

DELAY = 5.0
COOLDOWN = 11.0


def rules(clock: FakeClock, run_id: str = "me") -> SwitchRules:
    return SwitchRules(run_id, switch_delay=DELAY, release_cooldown=COOLDOWN, clock=clock)


def holder(run_id: str, *, active: bool = True, epoch: int = 1) -> RunningData:
    return RunningData(address=f"{run_id}-host:1", run_id=run_id, active=active, epoch=epoch)


def test_node_absent_at_start_is_grabbed_at_once() -> None:
    clock = FakeClock()
    r = rules(clock)
    r.observe(None)
    assert r.may_grab()
    assert r.grab_at == clock.monotonic()


def test_someone_elses_node_deleted_waits_for_the_switch_delay() -> None:
    clock = FakeClock()
    r = rules(clock)
    r.observe(holder("other"))
    assert not r.may_grab()
    assert r.grab_at is None
    r.observe(None)
    assert not r.may_grab()
    clock.advance(DELAY - 0.001)
    assert not r.may_grab()
    clock.advance(0.002)
    assert r.may_grab()


def test_our_own_node_deleted_is_grabbed_again_at_once() -> None:
    """E.g. our session expired and came back: keep the destination where it was."""
    clock = FakeClock()
    r = rules(clock)
    r.observe(holder("me"))
    r.observe(None)
    assert r.may_grab()


def test_repeated_absent_observations_keep_the_first_decision() -> None:
    clock = FakeClock()
    r = rules(clock)
    r.observe(holder("other"))
    r.observe(None)
    first = r.grab_at
    clock.advance(1.0)
    r.observe(None)  # e.g. the data watch re-read after a reconnect
    assert r.grab_at == first


def test_a_new_holder_cancels_a_pending_grab() -> None:
    clock = FakeClock()
    r = rules(clock)
    r.observe(holder("other"))
    r.observe(None)
    r.observe(holder("third"))
    clock.advance(DELAY * 2)
    assert not r.may_grab()
    r.observe(None)
    assert not r.may_grab(), "a new deletion starts a new delay"
    clock.advance(DELAY)
    assert r.may_grab()


def test_after_a_manual_release_we_stay_away_for_the_cooldown() -> None:
    """Canal lets the released node race again after the delay; we let the standby win."""
    clock = FakeClock()
    r = rules(clock)
    r.observe(holder("me"))
    r.released_by_operator()
    r.observe(None)
    clock.advance(DELAY + 0.1)
    assert not r.may_grab(), "a standby grabs after the switch delay; we must not race it"
    clock.advance(COOLDOWN - DELAY)
    assert r.may_grab(), "nobody took over: come back rather than leave it unowned"


def test_the_cooldown_ends_once_someone_else_took_over() -> None:
    clock = FakeClock()
    r = rules(clock)
    r.observe(holder("me"))
    r.released_by_operator()
    r.observe(None)
    r.observe(holder("standby"))
    r.observe(None)  # the standby dies later: ordinary rules again
    clock.advance(DELAY)
    assert r.may_grab()


def test_running_data_round_trip_and_garbage() -> None:
    data = RunningData("h:1", "abc", True, 4, 12.5)
    assert RunningData.parse(data.to_bytes()) == data
    assert RunningData.parse(b"not json") is None
    assert RunningData.parse(b'{"address": "x"}') is None
    assert RunningData.parse(None) is None


def test_a_holder_whose_session_ended_is_replaced_at_once() -> None:
    clock = FakeClock()
    r = rules(clock)
    r.observe(holder("other"))
    r.observe(None)
    assert r.waiting_for_switch_delay()
    r.holder_session_ended()
    assert r.may_grab()
    assert not r.waiting_for_switch_delay()


def test_a_session_end_does_not_cut_our_release_cooldown() -> None:
    clock = FakeClock()
    r = rules(clock)
    r.observe(holder("me"))
    r.released_by_operator()
    r.observe(None)
    assert not r.waiting_for_switch_delay(), "a cool-down is not a switch delay"
    r.holder_session_ended()
    assert not r.may_grab()
    clock.advance(COOLDOWN)
    assert r.may_grab()


def test_a_session_end_while_the_node_is_held_changes_nothing() -> None:
    clock = FakeClock()
    r = rules(clock)
    r.observe(holder("other"))
    r.holder_session_ended()
    assert not r.may_grab()
    assert r.grab_at is None
