"""A re-read after DDL reaches the lease holder's side work by one path: the commit report.

Every writer's commit under the term (the runtime's, a snapshot's, a repair's) is told to
:meth:`SideWork.committed`; a report naming tables makes the re-read due (the stream stops
after that commit) until the supervisor takes it.
"""

from __future__ import annotations

import pytest

from cdc_platform.events import ResumePosition
from cdc_platform.runtime.side_work import SideWork
from cdc_platform.sink.report import CommitReport

pytestmark = pytest.mark.unit


def _report(batch_seq: int, rereads: tuple[str, ...] = ()) -> CommitReport:
    resume = ResumePosition("mysql-bin.000001", 4 + batch_seq)
    return CommitReport("shop", batch_seq, batch_seq, 1, 2, resume, 1, 0.0, 0.1, False,
                        rereads=rereads)  # fmt: skip


def test_a_commit_naming_tables_makes_a_re_read_due_until_it_is_taken() -> None:
    side = SideWork()
    assert not side.committed(_report(1))
    assert not side.take_reread()
    assert side.committed(_report(2, ("shop.orders",)))
    assert side.committed(_report(3)), "still due: the stream stops after every later commit"
    assert side.take_reread()
    assert not side.take_reread()
    assert not side.committed(_report(4))
