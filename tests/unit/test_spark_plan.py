"""Schema versions and renames: which column of each version a mirror column was."""

from __future__ import annotations

import json

import pytest

from cdc_platform.spark.mirror_state import schema_signature
from cdc_platform.spark.plan import name_mappings
from cdc_platform.spark.timeline import SchemaVersion, Timeline
from cdc_platform.spark.types import parse_columns
from cdc_platform.testing.spark_changes import column

pytestmark = pytest.mark.unit


def version(names: list[str], min_seq: int, max_seq: int) -> SchemaVersion:
    text = json.dumps([column(n, "int", pk=(n == "id")) for n in names])
    return SchemaVersion(text, parse_columns(text), min_seq, max_seq)


def test_renames_drops_and_readds_are_followed_across_versions() -> None:
    v1 = version(["id", "a", "b", "c"], 1, 10)
    v2 = version(["id", "x", "b", "c"], 12, 20)  # a renamed to x (seq 11)
    v3 = version(["id", "x", "c", "b"], 22, 30)  # b dropped and re-added (seq 21)
    line = Timeline(
        db="d",
        table="t",
        lo=0,
        hi=32,
        row_changes=28,
        versions=(v1, v2, v3),
        ddls=(
            (11, "ALTER TABLE t RENAME COLUMN a TO x"),
            (21, "ALTER TABLE t DROP COLUMN b, ADD COLUMN b INT"),
            (31, "ALTER TABLE t CHANGE c cc INT"),
        ),
        target=parse_columns(json.dumps([column(n, "int") for n in ["id", "x", "cc", "b"]])),
    )
    mappings = name_mappings(line)
    assert mappings[v1.columns] == {"id": "id", "x": "a", "cc": "c", "b": None}
    assert mappings[v2.columns] == {"id": "id", "x": "x", "cc": "c", "b": None}
    assert mappings[v3.columns] == {"id": "id", "x": "x", "cc": "c", "b": "b"}
    assert mappings[None] == {"id": "id", "x": "x", "cc": "cc", "b": "b"}


def test_signature_ignores_what_does_not_change_the_mirror() -> None:
    a = parse_columns(json.dumps([column("id", "int", pk=True), column("s", "varchar", length=10)]))
    b = parse_columns(json.dumps([column("id", "int", pk=True), column("s", "varchar", length=40)]))
    c = parse_columns(json.dumps([column("id", "bigint", pk=True), column("s", "varchar")]))
    assert schema_signature(a) == schema_signature(b)
    assert schema_signature(a) != schema_signature(c)
