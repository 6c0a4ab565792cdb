"""`--exit-when-idle`: a quiet stream counts as idle once the server said it had nothing more
(a heartbeat); before that, only after much longer (still connecting or catching up on a busy
machine, where an early exit would skip what the run was started for)."""

from __future__ import annotations

import pytest

from cdc_platform.runtime.idle import IDLE_WITHOUT_HEARTBEAT_FACTOR, idle_long_enough

pytestmark = pytest.mark.unit


def test_after_a_heartbeat_the_idle_time_is_the_limit() -> None:
    assert not idle_long_enough(1.4, 1.5, heard_idle=True)
    assert idle_long_enough(1.5, 1.5, heard_idle=True)


def test_without_a_heartbeat_a_quiet_stream_is_given_longer() -> None:
    assert not idle_long_enough(1.5, 1.5, heard_idle=False)
    assert not idle_long_enough(5.9, 1.5, heard_idle=False)
    assert idle_long_enough(1.5 * IDLE_WITHOUT_HEARTBEAT_FACTOR, 1.5, heard_idle=False)
