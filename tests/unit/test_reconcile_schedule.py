"""The reconciliation's randomized schedule, its sensor, and the repair inbox (no servers)."""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dagster import (
    DagsterInstance,
    DagsterRun,
    DagsterRunStatus,
    SensorResult,
    SkipReason,
    build_sensor_context,
    instance_for_test,
)

from cdc_platform.backfill.repair import RepairKey, RepairResult, RepairTable
from cdc_platform.errors import ConfigError, ReconcileError
from cdc_platform.reconcile.inbox import RepairInbox, signing_key
from cdc_platform.reconcile.schedule import DueState, next_interval
from cdc_platform.spark.catalog import Catalog, CatalogTable
from dagster_defs.cdc_job import CDC_JOB, DESTINATION_TAG
from dagster_defs.reconcile import (
    RECONCILE_JOB,
    RECONCILE_TAG,
    build_reconcile_schedule,
    check_keys,
)
from dagster_defs.resources import PlatformResource

pytestmark = pytest.mark.unit


def test_interval_is_uniform_between_min_and_max() -> None:
    assert next_interval((15, 30), lambda: 0.0) == 15 * 60
    assert next_interval((15, 30), lambda: 1.0) == 30 * 60
    assert next_interval((15, 30), lambda: 0.5) == 22.5 * 60


def test_due_state_first_sight_waits_then_fires_and_forgets_removed() -> None:
    state = DueState()
    assert state.due(["a", "b"], 1000.0, (1, 2), lambda: 0.0) == []  # first sight: scheduled
    assert state.next_due == {"a": 1060.0, "b": 1060.0}
    assert state.due(["a", "b"], 1059.0, (1, 2), lambda: 0.0) == []
    assert state.due(["a", "b"], 1060.0, (1, 2), lambda: 0.0) == ["a", "b"]
    state.reschedule("a", 1060.0, (1, 2), lambda: 1.0)
    assert state.next_due["a"] == 1180.0
    assert state.due(["a"], 1061.0, (1, 2)) == []
    assert set(state.next_due) == {"a"}
    again = DueState.from_cursor(state.to_cursor())
    assert again.next_due == state.next_due
    assert DueState.from_cursor("not json").next_due == {}


def test_config_rejects_inverted_interval(tmp_path: Path) -> None:
    from cdc_platform.config import load_config  # noqa: PLC0415

    conf = tmp_path / "conf"
    (conf / "destinations").mkdir(parents=True)
    (conf / "platform.yaml").write_text("reconcile: {interval_minutes: [30, 15]}\n")
    with pytest.raises(ConfigError, match="interval_minutes"):
        load_config(conf)


# -- the sensor ------------------------------------------------------------------------------

INSTANCE = """\
source:
  user: cdc
  password_env: CDC_SOURCE_PASSWORD
  server_id: {server_id}
"""


@pytest.fixture
def instance() -> Iterator[DagsterInstance]:
    with instance_for_test() as inst:
        yield inst


@pytest.fixture
def conf(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("CDC_SOURCE_PASSWORD", "x")
    root = tmp_path / "conf"
    for i, name in enumerate(["a", "b"]):
        (root / "destinations" / name).mkdir(parents=True)
        (root / "destinations" / name / "instance.yaml").write_text(
            INSTANCE.format(server_id=i + 1)
        )
    (root / "platform.yaml").write_text("reconcile: {interval_minutes: [15, 30]}\n")
    return root


def add_run(instance: DagsterInstance, job: str, tags: dict[str, str]) -> None:
    instance.add_run(
        DagsterRun(
            job_name=job, run_id=str(uuid.uuid4()), status=DagsterRunStatus.STARTED, tags=tags
        )
    )


def test_sensor_requests_only_where_the_lease_is_held_after_a_random_wait(
    instance: DagsterInstance, conf: Path
) -> None:
    now = [10_000.0]
    tables = {
        name: Catalog(name, (CatalogTable("db", "t1"), CatalogTable("db", "t2")))
        for name in ("a", "b")
    }
    checks = {name: check_keys(name, catalog) for name, catalog in tables.items()}
    sensor = build_reconcile_schedule(clock=lambda: now[0], rand=lambda: 0.5, checks=checks)

    def tick(cursor: str | None) -> SensorResult:
        context = build_sensor_context(
            instance=instance,
            cursor=cursor,
            resources={"platform": PlatformResource(conf_dir=str(conf))},
        )
        result = sensor(context)
        assert isinstance(result, SensorResult)
        return result

    first = tick(None)
    assert not first.run_requests
    assert json.loads(first.cursor or "{}") == {"a": 10_000 + 22.5 * 60, "b": 10_000 + 22.5 * 60}

    add_run(instance, CDC_JOB, {DESTINATION_TAG: "a"})  # a streams, b does not
    now[0] += 22.5 * 60
    second = tick(first.cursor)
    assert second.run_requests is not None
    assert [r.tags[RECONCILE_TAG] for r in second.run_requests] == ["a"]
    # one run per destination, every table's check in it (cdc/a/db/t1, cdc/a/db/t2)
    assert second.run_requests[0].asset_check_keys == checks["a"]
    assert [k.asset_key.path for k in checks["a"]] == [["cdc", "a", "db", t] for t in ("t1", "t2")]
    due = json.loads(second.cursor or "{}")
    assert due["a"] == due["b"] == now[0] + 22.5 * 60  # b skipped and rescheduled too

    # a reconciliation of `a` still running when `a` is due again: not launched twice
    add_run(instance, RECONCILE_JOB, {RECONCILE_TAG: "a"})
    now[0] += 22.5 * 60
    third = tick(second.cursor)
    assert not third.run_requests
    assert isinstance(third.skip_reason, SkipReason)
    assert "still running" in (third.skip_reason.skip_message or "")


def test_sensor_disabled(instance: DagsterInstance, conf: Path) -> None:
    (conf / "platform.yaml").write_text("reconcile: {enabled: false}\n")
    context = build_sensor_context(
        instance=instance, resources={"platform": PlatformResource(conf_dir=str(conf))}
    )
    result = build_reconcile_schedule()(context)
    assert isinstance(result, SkipReason)


# -- the inbox -------------------------------------------------------------------------------

KEY = signing_key("source-secret", "d")


def test_inbox_claim_is_exclusive_and_results_travel(tmp_path: Path) -> None:
    inbox = RepairInbox(tmp_path / "_reconcile", key=KEY)
    assert not inbox.pending()
    assert inbox.claim() is None
    tables = [
        RepairTable("db", "t", [RepairKey([1], '{"id":1}'), RepairKey([{"b64": "AA=="}], "x")])
    ]
    request_id = inbox.submit(tables)
    assert inbox.pending()
    other = RepairInbox(tmp_path / "_reconcile", key=KEY)
    claimed = inbox.claim()
    assert claimed is not None
    assert claimed[0] == request_id
    assert claimed[1] == tables
    assert other.claim() is None  # only one claimer wins
    assert not inbox.withdraw(request_id)  # claimed: cannot be withdrawn any more
    inbox.finish(request_id, RepairResult(upserts={"db.t": 1}, batches=[7], epoch=3))
    result = inbox.wait(request_id, timeout=0)
    assert result is not None
    assert result.upserts == {"db.t": 1}
    assert result.batches == [7]
    assert result.epoch == 3


def test_inbox_unclaimed_request_is_withdrawn_and_errors_raise(tmp_path: Path) -> None:
    inbox = RepairInbox(tmp_path / "_reconcile", key=KEY)
    request_id = inbox.submit([RepairTable("db", "t", [RepairKey([1], '{"id":1}')])])
    assert inbox.wait(request_id, timeout=0, poll=0) is None
    assert not inbox.pending()
    second = inbox.submit([RepairTable("db", "t", [RepairKey([2], '{"id":2}')])])
    claimed = inbox.claim()
    assert claimed is not None
    inbox.finish(second, error="source unreachable")
    with pytest.raises(ReconcileError, match="source unreachable"):
        inbox.wait(second, timeout=0)


def test_inbox_refuses_unsigned_tampered_foreign_and_stale_requests(tmp_path: Path) -> None:
    root = tmp_path / "_reconcile"
    now = [1_000_000.0]
    allowed = {("db", "t")}
    holder = RepairInbox(
        root, key=KEY, allowed=lambda db, t: (db, t) in allowed, wall_clock=lambda: now[0]
    )
    table = [RepairTable("db", "t", [RepairKey([1], '{"id":1}')])]
    assert signing_key("", "d") is None
    with pytest.raises(ReconcileError, match="cannot sign"):
        RepairInbox(root).submit(table)

    def refused(request_id: str, why: str) -> None:
        assert holder.claim() is None
        with pytest.raises(ReconcileError, match=f"refused: .*{why}"):
            holder.wait(request_id, timeout=0)

    other_key = RepairInbox(
        root, key=signing_key("source-secret", "other"), wall_clock=lambda: now[0]
    )
    refused(other_key.submit(table), "wrong signature")
    requester = RepairInbox(root, key=KEY, wall_clock=lambda: now[0])
    tampered = requester.submit(table)
    path = root / "requests" / f"{tampered}.json"
    item = json.loads(path.read_text())
    item["tables"][0]["table"] = "u"
    path.write_text(json.dumps(item))
    refused(tampered, "wrong signature")
    unsigned = requester.submit(table)
    path = root / "requests" / f"{unsigned}.json"
    item = json.loads(path.read_text())
    del item["signature"]
    path.write_text(json.dumps(item))
    refused(unsigned, "not signed")
    (root / "requests" / "junk.json").write_text("{not json")
    refused("junk", "JSONDecodeError")
    foreign = requester.submit([RepairTable("mysql", "user", [RepairKey([1], '{"id":1}')])])
    refused(foreign, "outside the destination's filters")
    stale = requester.submit(table)
    now[0] += 2 * 24 * 3600
    refused(stale, "outside the accepted age")
    fresh = requester.submit(table)
    assert holder.claim() == (fresh, table)


def test_inbox_wait_ends_when_a_claimed_request_shows_no_sign_of_life(tmp_path: Path) -> None:
    now = [0.0]

    def sleep(seconds: float) -> None:
        now[0] += seconds

    requester = RepairInbox(tmp_path / "_reconcile", key=KEY, clock=lambda: now[0], sleep=sleep)
    holder = RepairInbox(tmp_path / "_reconcile", key=KEY)
    request_id = requester.submit([RepairTable("db", "t", [RepairKey([1], '{"id":1}')])])
    assert holder.claim() is not None  # ... and the holder dies
    with pytest.raises(ReconcileError, match="no sign of life for 60 s"):
        requester.wait(request_id, timeout=5, poll=1)
    assert 60 <= now[0] <= 62, "it waited past the claim deadline, as long as stale_after"

    gone = requester.submit([RepairTable("db", "t", [RepairKey([1], '{"id":1}')])])
    assert holder.claim() is not None
    (tmp_path / "_reconcile" / "claimed" / f"{gone}.json").unlink()  # removed by hand
    with pytest.raises(ReconcileError, match="without a result"):
        requester.wait(gone, timeout=5, poll=1)


def test_inbox_keep_alive_touches_the_claim(tmp_path: Path) -> None:
    inbox = RepairInbox(tmp_path / "_reconcile", key=KEY)
    request_id = inbox.submit([RepairTable("db", "t", [RepairKey([1], '{"id":1}')])])
    assert inbox.claim() is not None
    path = tmp_path / "_reconcile" / "claimed" / f"{request_id}.json"
    os.utime(path, (1.0, 1.0))
    with inbox.keep_alive(request_id, interval=0.01):
        deadline = time.monotonic() + 30
        while path.stat().st_mtime == 1.0 and time.monotonic() < deadline:
            time.sleep(0.01)
    assert path.stat().st_mtime != 1.0


# -- the repair decision -----------------------------------------------------------------------


def test_repair_decision_skips_touched_and_lagging_keys() -> None:
    from cdc_platform.backfill.repair import _decide  # noqa: PLC0415

    keys = [RepairKey([i], f'{{"id":{i}}}') for i in range(1, 7)]
    source = {
        '{"id":1}': "img1",  # touched by the binlog segment: left to it
        '{"id":2}': "img2",  # log is newer than the mirror and equal: only lagged
        '{"id":3}': "img3",  # log equal but not newer than the mirror: the mirror lost it
        '{"id":4}': "img4-quiet",  # changed behind the binlog's back
        # 5: gone from the source, the log still has it
        # 6: gone from the source, the log deleted it after the mirror's state: lagged
        '{"id":9}': "img9",  # returned under another spelling of a suspect: true state
    }
    logged = {
        '{"id":1}': (50, "old1"),
        '{"id":2}': (40, "img2"),
        '{"id":3}': (20, "img3"),
        '{"id":4}': (20, "img4"),
        '{"id":5}': (10, "img5"),
        '{"id":6}': (45, None),
    }
    upserts, deletes, skipped = _decide(keys, source, {'{"id":1}'}, logged, mirror_seq=30)
    assert upserts == [('{"id":3}', "img3"), ('{"id":4}', "img4-quiet"), ('{"id":9}', "img9")]
    assert deletes == ['{"id":5}']
    assert skipped == 3


def test_mirror_refresh_decision() -> None:
    from dagster_defs.mirror_refresh import MirrorsState, decide  # noqa: PLC0415

    def state(changes: int | None, *applied: int | None, **kw: Any) -> tuple[bool, str]:
        oldest = kw.pop("oldest", 90.0)
        mirrors = MirrorsState(changes, list(applied), oldest, **kw)
        return decide(mirrors, now=100.0, refresh_after=30.0, retry_after=20.0)

    assert state(7, 7, 5) == (True, "change log at version 7, mirrors at 5")
    assert state(7, 7, 7) == (False, "up to date at change-log version 7; refresh in 20 s")
    assert state(7, 7, 7, oldest=60.0) == (True, "refresh: oldest mirror materialized 40 s ago")
    assert state(7, 7, None, oldest=None) == (True, "1 table(s) never materialized")
    assert state(None, None) == (False, "no change-log commit reported yet")
    assert state(7, 5, run_in_progress="abcdef123") == (False, "run abcdef12 is applying")
    assert state(7, 5, failed_at=95.0) == (False, "last mirrors run failed; retrying in 15 s")
    assert state(7, 5, failed_at=70.0)[0]  # waited long enough after the failure


def test_mirror_refresh_requests_the_tables_behind_the_change_log(
    instance: DagsterInstance, conf: Path
) -> None:
    """Judged by versions: a change-log commit reported while a mirrors run was under way is
    still found (its version is above the one the run applied)."""
    from dagster import AssetKey, AssetMaterialization  # noqa: PLC0415

    from dagster_defs.mirror_refresh import build_mirror_refresh  # noqa: PLC0415
    from dagster_defs.table_assets import CHANGE_LOG_VERSION, MIRROR_TAG  # noqa: PLC0415

    tables = [AssetKey(["cdc", "a", "db", t]) for t in ("t1", "t2")]
    changes = AssetKey(["cdc", "a", "changes"])
    sensor = build_mirror_refresh({"a": tables}, {"a": 3600.0}, minimum_interval_seconds=1)

    def tick() -> list[Any]:
        context = build_sensor_context(
            instance=instance, resources={"platform": PlatformResource(conf_dir=str(conf))}
        )
        result = sensor(context)
        return list(result.run_requests or []) if isinstance(result, SensorResult) else []

    def commit(version: int) -> None:
        instance.report_runless_asset_event(
            AssetMaterialization(changes, metadata={"delta_version": version})
        )

    def mirrored(version: int) -> None:
        for key in tables:
            instance.report_runless_asset_event(
                AssetMaterialization(key, metadata={CHANGE_LOG_VERSION: version})
            )

    assert tick() == []  # no change log yet
    commit(3)
    (request,) = tick()  # never mirrored
    assert request.asset_selection == tables
    assert request.tags[MIRROR_TAG] == "a"
    assert request.asset_check_keys == []  # the reconciliation checks run on their own schedule
    mirrored(3)
    assert tick() == []
    commit(4)  # e.g. while a run that had read version 3 was still writing
    assert [r.asset_selection for r in tick()] == [tables]
    instance.add_run(
        DagsterRun(
            job_name="cdc_mirrors",
            run_id=str(uuid.uuid4()),
            status=DagsterRunStatus.STARTED,
            tags={MIRROR_TAG: "a"},
        )
    )
    assert tick() == []  # a mirrors run of the destination is under way


def test_repair_notes_its_own_commits_instead_of_rereading_the_log() -> None:
    from cdc_platform.backfill.repair import _COMMITTED_NOW, _note_committed  # noqa: PLC0415
    from cdc_platform.events import BinlogPosition, ChangeEvent, EventKind, Op, Transaction  # noqa: PLC0415
    from cdc_platform.source.row_reader import SnapshotTable  # noqa: PLC0415

    spec = SnapshotTable("db", "t", (), ("id",), "[]")
    at = BinlogPosition("b.000001", 4)
    txn = Transaction(start=at, gtid=None, gtid_set_before=None, server_id=1, timestamp=0)

    def row(
        op: Op, pk: str, before: str | None, after: str | None, table: str = "t"
    ) -> ChangeEvent:
        return ChangeEvent(
            EventKind.ROW,
            txn,
            at,
            0,
            db="db",
            table=table,
            op=op,
            pk=pk,
            before=before,
            after=after,
        )

    logged = {'{"id":1}': (5, "old1"), '{"id":9}': (5, "img9")}
    _note_committed(
        logged,
        [
            row(Op.UPDATE, '{"id":2}', '{"id":1,"v":0}', '{"id":2,"v":1}'),  # key 1 -> 2
            row(Op.DELETE, '{"id":3}', '{"id":3}', None),
            row(Op.INSERT, '{"id":9}', None, "other table", table="u"),  # not this table
        ],
        spec,
    )
    assert logged == {
        '{"id":1}': (_COMMITTED_NOW, None),
        '{"id":2}': (_COMMITTED_NOW, '{"id":2,"v":1}'),
        '{"id":3}': (_COMMITTED_NOW, None),
        '{"id":9}': (5, "img9"),
    }
