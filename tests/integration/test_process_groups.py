"""A fixture's process group is stopped whole: also a child that ignores SIGTERM, like the
``dagster api grpc`` code servers a Dagster daemon starts in its own group."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from cdc_platform.testing.processes import group_members, stop_process_group, wait_until

pytestmark = pytest.mark.integration

LEADER = """
import signal, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", sys.argv[1]])
time.sleep(3600)
"""

STUBBORN_CHILD = """
import pathlib, signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
pathlib.Path(sys.argv[1]).write_text("ignoring SIGTERM")
time.sleep(3600)
"""


def test_a_child_that_ignores_sigterm_does_not_outlive_its_group(tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    child = STUBBORN_CHILD.replace("sys.argv[1]", repr(str(ready)))
    leader = subprocess.Popen([sys.executable, "-c", LEADER, child], start_new_session=True)
    try:
        wait_until(ready.exists, timeout=30, what="the child's SIGTERM handler")
        assert len(group_members(leader.pid)) == 2  # the leader and its child, one group

        left = stop_process_group(leader, grace=1.0)

        assert left == []
        assert group_members(leader.pid) == []
        assert leader.returncode is not None
    finally:
        if group_members(leader.pid):
            stop_process_group(leader, grace=0.0)
