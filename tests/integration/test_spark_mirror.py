"""Mirrors from hand-made change logs with real Delta tables.

A source table is modelled in Python (cdc_platform.testing.spark_changes); after every apply
the mirror must equal the model row for row and column for column, typed. The merge with DDL
and the keyless / composite-key tables run on every engine (Sail, classic Apache Spark with
delta-spark, an Apache Spark Connect server); the rest on the embedded engine.
"""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from cdc_platform.errors import MirrorError, UnsupportedColumnTypeError
from cdc_platform.spark.apply_counts import staged_counts
from cdc_platform.spark.locations import mirror_tables, mirror_uri
from cdc_platform.spark.mirror import apply_changes
from cdc_platform.spark.mirror_state import read_state, state_history
from cdc_platform.spark.target import MirrorTarget
from cdc_platform.spark.types import parse_columns
from cdc_platform.testing.spark_changes import ChangeLogWriter, SourceTable, column, expected_row
from cdc_platform.testing.spark_engines import ENGINES, SparkEngine

pytestmark = pytest.mark.integration

TYPED = "null"
"""Dates typed (``zero_dates``): the model compares Python dates and times."""

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def mirror_rows(spark: SparkSession, uri: str) -> tuple[list[str], list[dict[str, Any]]]:
    frame = spark.read.format("delta").load(uri)
    rows = [r.asDict() for r in frame.collect()]
    return frame.columns, rows


def assert_mirror_equals(spark: SparkSession, root: str, source: SourceTable) -> None:
    names, rows = mirror_rows(spark, mirror_uri(root, source.db, source.table))
    assert names == source.names, "same columns, same order"
    expected = [expected_row(r, source.columns) for r in source.rows.values()]
    have = {repr([r[k] for k in source.key_names]): r for r in rows}
    want = {repr([r[k] for k in source.key_names]): r for r in expected}
    assert len(have) == len(rows), "keys are unique in the mirror"
    assert sorted(have) == sorted(want), "same keys"
    differences = {
        key: {n: (have[key][n], want[key][n]) for n in names if have[key][n] != want[key][n]}
        for key in want
        if have[key] != want[key]
    }
    assert not differences, "same values"


def items_table(db: str = "shop") -> SourceTable:
    return SourceTable(
        db,
        "items",
        [
            column("id", "int", pk=True),
            column("name", "varchar", length=256),
            column("price", "decimal", precision=12, scale=2),
            column("qty", "smallint", unsigned=True),
            column("big", "bigint", unsigned=True),
            column("ratio", "float"),
            column("updated", "datetime", scale=6),
            column("seen", "timestamp", scale=3),
            column("day", "date"),
            column("flags", "set", values=["a", "b", "c"]),
            column("kind", "enum", values=["x", "y"]),
            column("payload", "blob"),
            column("doc", "json"),
            column("bits", "bit", length=10),
            column("dur", "time", scale=0),
        ],
    )


class RandomChanges:
    """Random inserts, updates (some changing the key), deletes and column DDL on a model."""

    def __init__(self, source: SourceTable, seed: int) -> None:
        self.source = source
        self.rng = random.Random(seed)
        self.next_id = 1
        self.extra = 0

    def value(self, spec: dict[str, Any]) -> Any:  # noqa: PLR0911 (one per type)
        rng = self.rng
        kind = spec["type"]
        if rng.random() < 0.1 and not spec["pk"]:
            return None
        if kind in ("int", "smallint"):
            return rng.randint(0, 30000)
        if kind == "bigint":
            return rng.choice([0, 2**63, 2**64 - 1, rng.randint(0, 10**12)])
        if kind == "decimal":
            return f"{rng.randint(-(10**6), 10**6) / 100:.2f}"
        if kind == "float":
            return rng.choice([1.1, 0.5, -3.25, 1e-3])
        if kind == "datetime":
            day, minute, micros = rng.randint(1, 9), rng.randint(0, 9), rng.randint(0, 999999)
            return f"2024-0{day}-1{day} 10:1{minute}:00.{micros:06d}"
        if kind == "timestamp":
            return f"2024-06-0{rng.randint(1, 9)}T06:30:00.{rng.randint(0, 999):03d}Z"
        if kind == "date":
            return rng.choice(["2024-02-29", "1999-12-31", "0000-00-00"])
        if kind == "set":
            return sorted(rng.sample(["a", "b", "c"], rng.randint(0, 3)))
        if kind == "enum":
            return rng.choice(["x", "y"])
        if kind == "blob":
            return rng.choice(["", "AP8AAA==", "3q2+7w=="])
        if kind == "json":
            return rng.choice([{"a": [1, 2.5, None]}, [1, "two"], 3, {"n": {"m": True}}])
        if kind == "bit":
            return "".join(rng.choice("01") for _ in range(spec["length"]))
        if kind == "time":
            return rng.choice(["-01:00:00", "838:59:59", "00:00:01"])
        return f"text {rng.randint(0, 10**6)} ü"

    def row(self) -> dict[str, Any]:
        row = {c["name"]: self.value(c) for c in self.source.columns}
        row[self.source.key_names[0]] = self.next_id
        self.next_id += 1
        return row

    def batch(self, size: int) -> list[dict[str, Any]]:
        source, rng = self.source, self.rng
        events: list[dict[str, Any]] = []
        for _ in range(size):
            choice = rng.random()
            keys = list(source.rows)
            if choice < 0.4 or len(keys) < 3:
                events.append(source.insert(self.row()))
            elif choice < 0.7:
                key = rng.choice(keys)
                spec = rng.choice([c for c in source.columns if not c["pk"]])
                events.append(source.update(key, **{spec["name"]: self.value(spec)}))
            elif choice < 0.85:
                key = rng.choice(keys)
                new_id = self.next_id
                self.next_id += 1
                events.append(source.update(key, **{source.key_names[0]: new_id}))
            else:
                events.append(source.delete(rng.choice(keys)))
        return events


@pytest.mark.parametrize("spark_engine", ENGINES, indirect=True)
def test_random_changes_with_pk_updates_and_ddl_match_the_model(
    spark_engine: SparkEngine, tmp_path: Path
) -> None:
    spark = spark_engine.spark
    source = items_table()
    log = ChangeLogWriter(str(tmp_path / "changes"))
    root = str(tmp_path / "mirror")
    changes = RandomChanges(source, seed=7)
    modes = []
    plan: list[Any] = [
        None,
        None,
        lambda: [source.add_column(column("extra", "int"), "INT")],
        None,
        # two statements in one batch (each Spark job costs about a second on the JVM engines)
        lambda: [source.rename_column("name", "title"), source.drop_column("ratio")],
        None,
        lambda: [source.truncate()],
        None,
    ]
    for step, ddl in enumerate(plan):
        events = changes.batch(20)
        events += ddl() if ddl is not None else []
        events += changes.batch(20)
        log.commit(events, ts=NOW, committed_at=NOW)
        result = apply_changes(
            spark, MirrorTarget(log.uri, root, "shop", "items", zero_dates=TYPED)
        )
        modes.append(result.mode)
        assert result.last_seq == log.seq
        assert result.mirror_rows == len(source.rows), f"step {step}"
        # delta-rs reads what the engine wrote (an added TEXT column once made Spark Connect
        # write a `string collate UTF8_BINARY` column that delta-rs cannot read)
        assert result.mirror_version is not None, f"step {step}: delta-rs reads the mirror"
        assert_mirror_equals(spark, root, source)
    assert modes == [
        "rebuild", "merge", "rebuild", "merge", "rebuild", "merge", "rebuild", "merge",
    ]  # fmt: skip
    assert mirror_tables(spark, log.uri) == [("shop", "items")]
    history = state_history(spark, root, "shop", "items")
    assert [s.last_seq for s in history] == sorted(s.last_seq for s in history)
    assert len(history) == len(plan)


def test_counts_and_rerun_changes_nothing(spark: SparkSession, tmp_path: Path) -> None:
    source = SourceTable("shop", "t", [column("id", "int", pk=True), column("v", "text")])
    log = ChangeLogWriter(str(tmp_path / "changes"))
    root = str(tmp_path / "mirror")
    log.commit([source.insert({"id": i, "v": "a"}) for i in range(1, 6)], ts=NOW, committed_at=NOW)
    first = apply_changes(spark, MirrorTarget(log.uri, root, "shop", "t"))
    assert (first.mode, first.rows_inserted, first.mirror_rows) == ("rebuild", 5, 5)
    batch = [
        source.update((1,), v="b"),  # updated
        source.update((2,), id=20),  # old key deleted, new key inserted
        source.delete((3,)),  # deleted
        source.insert({"id": 6, "v": "new"}),  # inserted
        source.insert({"id": 7, "v": "gone"}),
        source.delete((7,)),  # inserted and deleted: no net effect
        source.update((4,), v="x"),
        source.update((4,), v="y"),  # two updates: one updated row
    ]
    log.commit(batch, ts=NOW, committed_at=NOW)
    second = apply_changes(spark, MirrorTarget(log.uri, root, "shop", "t"))
    assert second.mode == "merge"
    assert (second.rows_inserted, second.rows_updated, second.rows_deleted) == (2, 2, 2)
    assert (second.previous_seq, second.last_seq, second.changes) == (5, 13, 8)
    assert_mirror_equals(spark, root, source)
    version = DeltaTable(mirror_uri(root, "shop", "t")).version()
    third = apply_changes(spark, MirrorTarget(log.uri, root, "shop", "t"))
    assert (third.mode, third.last_seq, third.mirror_rows) == ("noop", 13, 5)
    assert DeltaTable(mirror_uri(root, "shop", "t")).version() == version, "no new commit"
    state = read_state(spark, root, "shop", "t")
    assert state is not None
    assert state.last_seq == 13
    metadata = second.metadata()
    assert (metadata["rows_inserted"], metadata["last_seq"], metadata["mode"]) == (2, 13, "merge")
    assert second.last_ts == NOW
    assert isinstance(metadata["lag_seconds"], float)
    assert metadata["lag_seconds"] > 0
    log.commit([source.ddl("ALTER TABLE t ADD INDEX iv (v(10))")], ts=NOW, committed_at=NOW)
    fourth = apply_changes(spark, MirrorTarget(log.uri, root, "shop", "t"))
    assert (fourth.mode, fourth.last_seq, fourth.changes, fourth.mirror_rows) == ("merge", 14, 0, 5)
    assert DeltaTable(mirror_uri(root, "shop", "t")).version() == version, "no mirror commit"


@pytest.mark.parametrize("step", ["computed", "mirror_committed", "state_committed"])
def test_interrupted_applies_rerun_to_the_same_result(
    spark: SparkSession, tmp_path: Path, step: str
) -> None:
    source = items_table()
    log = ChangeLogWriter(str(tmp_path / "changes"))
    changes = RandomChanges(source, seed=11)
    clean, crashed = str(tmp_path / "clean"), str(tmp_path / "crashed")

    def crash(at: str) -> None:
        if at == step:
            raise RuntimeError(f"simulated crash at {at}")

    batches = [
        lambda: changes.batch(30),  # rebuild (new mirror)
        lambda: changes.batch(30),  # merge
        lambda: [
            *changes.batch(5),
            source.add_column(column("z", "int"), "INT"),
            *changes.batch(10),
        ],  # rebuild (schema change)
    ]
    for batch in batches:
        log.commit(batch(), ts=NOW, committed_at=NOW)
        expected = apply_changes(
            spark, MirrorTarget(log.uri, clean, "shop", "items", zero_dates=TYPED)
        )
        with pytest.raises(RuntimeError, match="simulated crash"):
            apply_changes(
                spark, MirrorTarget(log.uri, crashed, "shop", "items", zero_dates=TYPED), hook=crash
            )
        again = apply_changes(
            spark, MirrorTarget(log.uri, crashed, "shop", "items", zero_dates=TYPED)
        )
        assert again.mode == ("noop" if step == "state_committed" else expected.mode)
        assert again.last_seq == expected.last_seq
        assert _same_rows(spark, clean, crashed)
        assert_mirror_equals(spark, crashed, source)


def _same_rows(spark: SparkSession, a: str, b: str) -> bool:
    left = mirror_rows(spark, mirror_uri(a, "shop", "items"))
    right = mirror_rows(spark, mirror_uri(b, "shop", "items"))
    return left[0] == right[0] and sorted(map(repr, left[1])) == sorted(map(repr, right[1]))


def test_merge_counts_by_delta_rs_equal_sparks(spark: SparkSession, tmp_path: Path) -> None:
    """The counts read from a staging table with delta-rs equal Spark's count of it, and Spark
    counts where delta-rs cannot read (a table that is not there)."""
    target = parse_columns(json.dumps(items_table().columns))
    first_kind, deleted = target.engine.first_kind, target.engine.deleted
    kinds = [("insert", False)] * 3 + [("insert", True)] * 2  # a key inserted then deleted
    kinds += [("update", False)] * 4 + [("update", True)] + [("delete", True)] * 2
    kinds += [("delete", False)]  # deleted, then inserted again: there before and now
    staged = spark.createDataFrame(
        [(i, kind, gone) for i, (kind, gone) in enumerate(kinds)],
        f"id INT, `{first_kind}` STRING, `{deleted}` BOOLEAN",
    )
    uri = str(tmp_path / "staging")
    staged.write.format("delta").save(uri)
    frame = spark.read.format("delta").load(uri)
    want = (3, 5, 3)  # inserted, updated, deleted
    assert staged_counts(frame, uri, target) == want
    assert staged_counts(frame, str(tmp_path / "missing"), target) == want  # Spark counted


def test_ddl_after_the_last_row_evolves_the_mirror(spark: SparkSession, tmp_path: Path) -> None:
    source = SourceTable(
        "shop", "t", [column("id", "int", pk=True), column("a", "text"), column("b", "int")]
    )
    log = ChangeLogWriter(str(tmp_path / "changes"))
    root = str(tmp_path / "mirror")
    log.commit([source.insert({"id": 1, "a": "x", "b": 2})], ts=NOW, committed_at=NOW)
    apply_changes(spark, MirrorTarget(log.uri, root, "shop", "t"))
    ddl = [
        source.rename_column("a", "title"),
        source.drop_column("b"),
        source.add_column(column("price", "decimal", precision=10, scale=2), "DECIMAL(10,2)"),
    ]
    log.commit(ddl, ts=NOW, committed_at=NOW)
    result = apply_changes(spark, MirrorTarget(log.uri, root, "shop", "t"))
    assert result.mode == "rebuild"
    assert_mirror_equals(spark, root, source)
    log.commit([source.update((1,), price="9.99")], ts=NOW, committed_at=NOW)
    result = apply_changes(spark, MirrorTarget(log.uri, root, "shop", "t"))
    assert_mirror_equals(spark, root, source)


@pytest.mark.parametrize("spark_engine", ENGINES, indirect=True)
def test_table_without_primary_key_and_composite_keys(
    spark_engine: SparkEngine, tmp_path: Path
) -> None:
    spark = spark_engine.spark
    nopk = SourceTable("s", "nopk", [column("x", "int"), column("y", "text")])
    pairs = SourceTable(
        "s",
        "pairs",
        [
            column("a", "int", pk=True),
            column("b", "varchar", pk=True, length=40),
            column("v", "int"),
        ],
    )
    log = ChangeLogWriter(str(tmp_path / "changes"))
    root = str(tmp_path / "mirror")
    log.commit(
        [
            nopk.insert({"x": 1, "y": None}),
            nopk.insert({"x": 2, "y": "b"}),
            pairs.insert({"a": 1, "b": "one", "v": 1}),
            pairs.insert({"a": 1, "b": "two", "v": 2}),
        ],
        ts=NOW,
        committed_at=NOW,
    )
    for table in ("nopk", "pairs"):
        apply_changes(spark, MirrorTarget(log.uri, root, "s", table))
    log.commit(
        [
            nopk.update((1, None), y="now set"),
            nopk.delete((2, "b")),
            pairs.update((1, "one"), b="uno"),
            pairs.update((1, "two"), v=22),
        ],
        ts=NOW,
        committed_at=NOW,
    )
    assert mirror_tables(spark, log.uri) == [("s", "nopk"), ("s", "pairs")]
    for table, source in (("nopk", nopk), ("pairs", pairs)):
        result = apply_changes(spark, MirrorTarget(log.uri, root, "s", table))
        assert result.mode == "merge"
        assert_mirror_equals(spark, root, source)


@pytest.mark.parametrize("spark_engine", ["classic"], indirect=True)
def test_a_mirror_with_deletion_vectors_reports_its_true_row_count(
    spark_engine: SparkEngine, tmp_path: Path
) -> None:
    """A user may turn on deletion vectors (Databricks does by default): a MERGE then marks
    rows deleted without rewriting files, so the files' statistics over-count. The apply's
    row count must still be the table's."""
    spark = spark_engine.spark
    source = SourceTable("s", "dv", [column("id", "int", pk=True), column("v", "text")])
    log = ChangeLogWriter(str(tmp_path / "changes"))
    root = str(tmp_path / "mirror")
    uri = mirror_uri(root, "s", "dv")
    log.commit([source.insert({"id": i, "v": "a"}) for i in range(1, 11)], ts=NOW, committed_at=NOW)
    assert apply_changes(spark, MirrorTarget(log.uri, root, "s", "dv")).mirror_rows == 10
    spark.sql(
        f"ALTER TABLE delta.`{uri}` SET TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')"
    )
    batch = [source.delete((1,)), source.delete((2,)), source.delete((3,))]
    log.commit([*batch, source.update((4,), v="b")], ts=NOW, committed_at=NOW)
    result = apply_changes(spark, MirrorTarget(log.uri, root, "s", "dv"))
    assert (result.mode, result.rows_deleted) == ("merge", 3)
    commits = sorted((Path(uri) / "_delta_log").glob("*.json"))
    assert any('"deletionVector":{' in c.read_text() for c in commits), "the MERGE used them"
    assert result.mirror_rows == 7
    assert_mirror_equals(spark, root, source)


def test_unknown_column_type_and_missing_change_log_are_clear_errors(
    spark: SparkSession, tmp_path: Path
) -> None:
    with pytest.raises(MirrorError, match="no change log"):
        apply_changes(spark, MirrorTarget(str(tmp_path / "nothing"), str(tmp_path / "m"), "a", "b"))
    source = SourceTable("s", "v", [column("id", "int", pk=True), column("vec", "vector")])
    log = ChangeLogWriter(str(tmp_path / "changes"))
    log.commit([source.insert({"id": 1, "vec": "AAAA"})], ts=NOW, committed_at=NOW)
    with pytest.raises(UnsupportedColumnTypeError, match=r"s\.v\.vec: column type 'vector'"):
        apply_changes(spark, MirrorTarget(log.uri, str(tmp_path / "m"), "s", "v"))


@pytest.mark.parametrize("spark_engine", ENGINES, indirect=True)
def test_create_and_drop_table_ddl(spark_engine: SparkEngine, tmp_path: Path) -> None:
    spark = spark_engine.spark
    log = ChangeLogWriter(str(tmp_path / "changes"))
    root = str(tmp_path / "mirror")
    empty = SourceTable("s", "e", [column("id", "int", pk=True)])
    log.commit(
        [empty.ddl("CREATE TABLE e (id INT NOT NULL, note VARCHAR(20), PRIMARY KEY (id))")],
        ts=NOW,
        committed_at=NOW,
    )
    result = apply_changes(spark, MirrorTarget(log.uri, root, "s", "e"))
    assert (result.mode, result.mirror_rows, result.columns) == ("rebuild", 0, ("id", "note"))
    old = SourceTable("s", "e", [column("id", "int", pk=True), column("note", "varchar")])
    log.commit([old.insert({"id": 1, "note": "old"})], ts=NOW, committed_at=NOW)
    apply_changes(spark, MirrorTarget(log.uri, root, "s", "e"))
    new = SourceTable("s", "e", [column("key", "bigint", pk=True), column("v", "double")])
    log.commit(
        [
            new.ddl("DROP TABLE e"),
            new.ddl("CREATE TABLE e (`key` BIGINT PRIMARY KEY, v DOUBLE)"),
            new.ddl("CREATE TABLE IF NOT EXISTS e (x INT)"),  # a no-op on an existing table
            new.insert({"key": 7, "v": 0.5}),
        ],
        ts=NOW,
        committed_at=NOW,
    )
    result = apply_changes(spark, MirrorTarget(log.uri, root, "s", "e"))
    assert result.mode == "rebuild"
    assert_mirror_equals(spark, root, new)
    log.commit([new.ddl("DROP TABLE e")], ts=NOW, committed_at=NOW)
    result = apply_changes(spark, MirrorTarget(log.uri, root, "s", "e"))
    assert (result.mode, result.mirror_rows) == ("rebuild", 0)


@pytest.mark.parametrize("spark_engine", ENGINES, indirect=True)
def test_a_value_converting_modify_never_fails_the_apply(
    spark_engine: SparkEngine, tmp_path: Path
) -> None:
    """DECIMAL(10,2) -> INT: older images hold '12.50', which a strict cast to int refuses
    (on Sail: NumberFormatException; on Apache Spark 4, whose casts are ANSI by default:
    CAST_INVALID_INPUT, at every apply). They become null until the source's re-read rows
    (here: one of them) carry the converted values."""
    spark = spark_engine.spark
    log = ChangeLogWriter(str(tmp_path / "changes"))
    root = str(tmp_path / "mirror")
    old = SourceTable(
        "s", "m", [column("id", "int", pk=True), column("amount", "decimal", precision=10, scale=2)]
    )
    log.commit(
        [
            old.insert({"id": 1, "amount": "12.50"}),
            old.insert({"id": 2, "amount": "-3.50"}),
        ],
        ts=NOW,
        committed_at=NOW,
    )
    assert apply_changes(spark, MirrorTarget(log.uri, root, "s", "m")).mirror_rows == 2
    new = SourceTable("s", "m", [column("id", "int", pk=True), column("amount", "int")])
    log.commit([new.ddl("ALTER TABLE m MODIFY amount INT")], ts=NOW, committed_at=NOW)
    result = apply_changes(spark, MirrorTarget(log.uri, root, "s", "m"))
    assert result.mode == "rebuild"
    assert {r["id"]: r["amount"] for r in mirror_rows(spark, mirror_uri(root, "s", "m"))[1]} == {
        1: None,
        2: None,
    }
    log.commit([new.insert({"id": 1, "amount": 13})], ts=NOW, committed_at=NOW)
    apply_changes(spark, MirrorTarget(log.uri, root, "s", "m"))
    assert {r["id"]: r["amount"] for r in mirror_rows(spark, mirror_uri(root, "s", "m"))[1]} == {
        1: 13,
        2: None,
    }
