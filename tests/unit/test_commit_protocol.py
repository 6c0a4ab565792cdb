"""The one commit protocol (backfill/commit.py), as every writer of a change log runs it.

A real Delta change log in a local lake; the lease gate and the observer are recorded. The
protocol's order is what makes a re-read after DDL safe: the gate, the re-read list (before
the DDL is in the change log), the gate again right before the fenced commit, the report.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from cdc_platform.backfill.commit import PendingCommit
from cdc_platform.backfill.reread_list import RereadRecord
from cdc_platform.config.instance import InstanceConfig
from cdc_platform.config.lake import LakeLocation
from cdc_platform.config.source import SourceConfig
from cdc_platform.errors import LeaseLostError
from cdc_platform.events import ChangeEvent
from cdc_platform.sink.destination_lake import DestinationLake
from cdc_platform.sink.report import CommitReport, count_transactions
from cdc_platform.sink.term import WriteTerm
from cdc_platform.testing.events import EventBuilder

pytestmark = pytest.mark.unit

CONFIG = InstanceConfig(
    source=SourceConfig(user="cdc", password_env="CDC_TEST_PASSWORD", server_id=7)
)


def _ddl(build: EventBuilder) -> ChangeEvent:
    """A DDL that changes the rows of ``shop.orders`` without row events (a re-read)."""
    return replace(build.ddl("ALTER TABLE orders MODIFY note BIGINT"), table="orders")


def test_a_side_commit_gates_notes_gates_again_commits_and_reports(tmp_path: Path) -> None:
    steps: list[str] = []
    reports: list[CommitReport] = []
    listed: list[set[str]] = []
    lake = LakeLocation(str(tmp_path))
    reread = RereadRecord(WriteTerm.in_lake("shop", CONFIG, lake).layout.reread_tables)

    def gate() -> None:
        steps.append("gate")
        listed.append(set(reread.load()))

    def on_commit(report: CommitReport) -> None:
        steps.append("report")
        reports.append(report)

    term = WriteTerm(
        "shop",
        CONFIG,
        DestinationLake.in_lake(lake, "shop", CONFIG),
        commit_gate=gate,
        on_commit=on_commit,
        checked_lake=True,
    )
    build = EventBuilder()
    events = [*build.transaction(2), _ddl(build)]
    sink = term.open_change_log()
    landed = PendingCommit(
        term, sink, events, batch_seq=1, resume=events[-1].resume_after(), epoch=1
    ).commit_beside()
    assert steps == ["gate", "gate", "report"]
    # Nothing listed at the first gate; at the gate right before the commit, the DDL's table.
    assert listed == [set(), {"shop.orders"}]
    (report,) = reports
    assert report.rereads == ("shop.orders",)
    assert report.ops == (("c", 2), ("ddl", 1))
    assert (report.rows, report.events, report.version) == (
        3,
        4,
        landed.version,
    )  # 2 rows, COMMIT, DDL
    # the transaction and the DDL: a side commit's source transactions count as the stream's
    assert (report.lag_seconds, report.transactions, report.partial) == (0.0, 2, False)
    checkpoint = sink.recover()
    assert checkpoint is not None
    assert checkpoint.batch_seq == 1
    sink.close()


def test_transactions_are_those_that_end_with_captured_changes() -> None:
    """A COMMIT after rows and a DDL end one each; the COMMIT of a transaction none of whose
    rows were captured (index 0), a heartbeat's (idle) and a DDL row the platform wrote (a
    snapshot's table definition: server id 0) end none."""
    build = EventBuilder()
    rows = build.transaction(3)
    (empty,) = build.transaction(0)
    heartbeat = replace(empty, txn=replace(empty.txn, idle=True, gtid=None))
    ddl = _ddl(build)
    definition = replace(ddl, txn=replace(ddl.txn, server_id=0, gtid=None))
    events = [*rows, empty, ddl, heartbeat, definition, *build.transaction(1)]
    assert count_transactions(events) == 3
    assert count_transactions(rows[:-1]) == 0  # the COMMIT is in the next batch (a split one)


def test_a_gate_that_refuses_after_the_note_leaves_the_change_log_untouched(
    tmp_path: Path,
) -> None:
    allowed = [True]

    def gate() -> None:
        if not allowed[0]:
            raise LeaseLostError("shop", 1, "the lease is no longer held")

    term = WriteTerm(
        "shop",
        CONFIG,
        DestinationLake.in_lake(LakeLocation(str(tmp_path)), "shop", CONFIG),
        commit_gate=gate,
        checked_lake=True,
    )
    build = EventBuilder()
    events = [_ddl(build)]
    sink = term.open_change_log()
    pending = PendingCommit(term, sink, events, 1, events[-1].resume_after(), 1)
    assert pending.prepare() == ("shop.orders",)
    allowed[0] = False  # the lease went while the list was written
    with pytest.raises(LeaseLostError):
        pending.land()
    assert sink.recover() is None
    sink.close()
