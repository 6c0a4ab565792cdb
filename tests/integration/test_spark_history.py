"""Daily change-log figures and as-of-day mirrors over a change log spanning three days."""

from __future__ import annotations

import copy
import random
from collections import defaultdict
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from cdc_platform.spark.history import daily_change_stats, mirror_as_of, seq_bound
from cdc_platform.spark.mirror import apply_changes
from cdc_platform.spark.mirror_state import state_history
from cdc_platform.spark.target import MirrorTarget
from cdc_platform.testing.spark_changes import ChangeLogWriter, SourceTable, column, expected_row
from cdc_platform.testing.spark_engines import ENGINES, SparkEngine

pytestmark = pytest.mark.integration

DAYS = [date(2026, 3, 1), date(2026, 3, 2), date(2026, 3, 3)]


def at(day: date, hour: int, minute: int = 0, second: int = 0) -> datetime:
    return datetime(day.year, day.month, day.day, hour, minute, second, tzinfo=UTC)


def independent_stats(uri: str) -> dict[tuple[date, str | None, str | None], dict[str, Any]]:
    """The figures computed in Python from the Delta table (delta-rs), not by Spark."""
    figures: dict[tuple[date, str | None, str | None], dict[str, Any]] = defaultdict(
        lambda: defaultdict(int)
    )
    for row in DeltaTable(uri).to_pyarrow_table().to_pylist():
        key = (row["ts"].astimezone(UTC).date(), row["db"], row["table"])
        entry = figures[key]
        entry[
            {"c": "inserts", "u": "updates", "d": "deletes", "r": "snapshots"}.get(row["op"], "ddl")
        ] += 1
        entry["rows"] += 1
        entry["bytes"] += sum(
            len(row[c].encode()) for c in ("pk", "before", "after", "ddl") if row[c] is not None
        )
        lag = (row["committed_at"] - row["ts"]).total_seconds()
        entry["max_lag_seconds"] = max(entry.get("max_lag_seconds", 0.0), lag)
        entry["first_seq"] = min(entry.get("first_seq", row["seq"]), row["seq"])
        entry["last_seq"] = max(entry["last_seq"], row["seq"])
    return figures


@pytest.mark.parametrize("spark_engine", ENGINES, indirect=True)
def test_three_days_of_figures_and_as_of_mirrors(spark_engine: SparkEngine, tmp_path: Path) -> None:
    """On every engine: daily figures, and as-of tables by replay and by ``versionAsOf``."""
    spark = spark_engine.spark
    rng = random.Random(3)
    orders = SourceTable(
        "shop",
        "orders",
        [column("id", "bigint", pk=True), column("status", "varchar", length=64),
         column("amount", "decimal", precision=12, scale=2)],
    )  # fmt: skip
    users = SourceTable("shop", "users", [column("id", "int", pk=True), column("name", "text")])
    log = ChangeLogWriter(str(tmp_path / "changes"))
    root = str(tmp_path / "mirror")
    snapshots: dict[date, dict[str, tuple[list[dict[str, Any]], list[dict[str, Any]]]]] = {}
    next_id = {"orders": 1, "users": 1}

    def some_changes(source: SourceTable, count: int) -> list[dict[str, Any]]:
        events = []
        for _ in range(count):
            keys = list(source.rows)
            choice = rng.random()
            if choice < 0.5 or len(keys) < 3:
                row = {c["name"]: None for c in source.columns}
                row["id"] = next_id[source.table]
                next_id[source.table] += 1
                if "status" in row:
                    row.update(status="new", amount=f"{rng.randint(1, 9999) / 100:.2f}")
                if "name" in row:
                    row["name"] = f"user {row['id']}"
                events.append(source.insert(row))
            elif choice < 0.75:
                key = rng.choice(keys)
                field = "status" if "status" in source.names else "name"
                events.append(source.update(key, **{field: f"v{rng.randint(0, 99)}"}))
            elif choice < 0.85:
                key = rng.choice(keys)
                events.append(source.update(key, id=next_id[source.table]))
                next_id[source.table] += 1
            else:
                events.append(source.delete(rng.choice(keys)))
        return events

    # orders has the DDL and the key updates; on the JVM engines, whose every Spark job costs
    # about a second, users' applies and as-of tables add time but no case
    as_of_tables = ("orders", "users") if spark_engine.name == "embedded" else ("orders",)
    for index, day in enumerate(DAYS):
        for hour in (1, 9, 17, 23):
            events = some_changes(orders, 15) + some_changes(users, 5)
            if index == 1 and hour == 1:
                events.insert(3, orders.add_column(column("note", "text"), "TEXT"))
            ts = at(day, hour, 59, 50)
            committed = ts + timedelta(seconds=rng.choice([1, 5, 30]))  # 23:59:50 + 30 s: next day
            log.commit(events, ts=ts, committed_at=committed)
            if hour == 9:  # mid-day applies give the as-of mirrors a base version
                for table in as_of_tables:
                    apply_changes(spark, MirrorTarget(log.uri, root, "shop", table))
        snapshots[day] = {
            s.table: (copy.deepcopy(s.columns), copy.deepcopy(list(s.rows.values())))
            for s in (orders, users)
        }

    expected = independent_stats(log.uri)
    ddl_of_day: dict[date, int] = {}
    for day in DAYS:
        figures = daily_change_stats(spark, log.uri, day)
        ddl_of_day[day] = figures[0].ddl
        assert [(f.db, f.table) for f in figures] == [("shop", "orders"), ("shop", "users")]
        for f in figures:
            want = expected[(day, f.db, f.table)]
            got = {k: getattr(f, k) for k in want}
            assert got == dict(want), (day, f.table)
            assert f.inserts + f.updates + f.deletes + f.snapshots + f.ddl == f.rows
    assert daily_change_stats(spark, log.uri, date(2026, 2, 28)) == []
    assert ddl_of_day == {DAYS[0]: 0, DAYS[1]: 1, DAYS[2]: 0}  # the ADD COLUMN on day two

    assert len(state_history(spark, root, "shop", "orders")) == 3
    for day in DAYS:
        for table in as_of_tables:
            columns, rows = snapshots[day][table]
            want = sorted((expected_row(r, columns) for r in rows), key=lambda r: r["id"])
            source = MirrorTarget(log.uri, root, "shop", table)
            for label, from_mirror in (("replay", False), ("version", True)):
                target = str(tmp_path / "asof" / label / f"{day}.{table}")
                result = mirror_as_of(spark, source, day, target, from_mirror=from_mirror)
                frame = spark.read.format("delta").load(target)
                assert frame.columns == [c["name"] for c in columns], (day, table, label)
                got = sorted((r.asDict() for r in frame.collect()), key=lambda r: r["id"])
                assert got == want, (day, table, label)
                assert result.last_seq == seq_bound(spark, log.uri, "shop", table, day)
                if label == "version":
                    assert result.previous_seq > 0, "started from a mirror version"
                else:
                    assert result.previous_seq == 0
