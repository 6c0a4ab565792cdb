"""kill -9 of `cdc-platform run` under a random workload loses and duplicates nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdc_platform.testing.crash import kill_cycle
from tests.conftest import MariaDBDatabase

pytestmark = pytest.mark.integration


def test_kill_nine_five_times_then_replay_equals_source(
    mariadb: MariaDBDatabase, tmp_path: Path
) -> None:
    report = kill_cycle(mariadb.server, mariadb.user, mariadb.name, tmp_path, kills=5, seed=11)
    assert report.kills == 5
    assert report.transactions > 20, "the workload must really have run"
    assert report.replay is not None
    assert report.replay.rows > 0
    detail = "\n".join(report.logs[-40:])
    assert not report.replay.duplicates, (
        f"changes committed twice: {report.replay.duplicates[:5]}\n{detail}"
    )
    assert not report.replay.seq_gaps, f"seq gaps: {report.replay.seq_gaps[:5]}"
    assert not report.replay.problems, report.replay.problems[:5]
    assert not report.mismatches, f"{report.mismatches}\n{detail}"
