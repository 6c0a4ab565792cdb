"""Source column types and their Spark types in the mirrors."""

from __future__ import annotations

import json

import pytest
from pyspark.sql import types as T  # noqa: N812 (the PySpark idiom)

from cdc_platform.errors import SparkError, UnsupportedColumnTypeError
from cdc_platform.spark.types import ColumnSpec, parse_columns, spark_type
from cdc_platform.testing.spark_changes import column

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        (ColumnSpec("c", "tinyint"), T.ByteType()),
        (ColumnSpec("c", "tinyint", unsigned=True), T.ShortType()),
        (ColumnSpec("c", "smallint", unsigned=True), T.IntegerType()),
        (ColumnSpec("c", "mediumint", unsigned=True), T.IntegerType()),
        (ColumnSpec("c", "int", unsigned=True), T.LongType()),
        (ColumnSpec("c", "bigint"), T.LongType()),
        (ColumnSpec("c", "bigint", unsigned=True), T.DecimalType(20, 0)),
        (ColumnSpec("c", "decimal", precision=65, scale=30), T.StringType()),
        (ColumnSpec("c", "decimal", precision=38, scale=10), T.DecimalType(38, 10)),
        (ColumnSpec("c", "float"), T.FloatType()),
        (ColumnSpec("c", "bit", length=64), T.DecimalType(20, 0)),
        (ColumnSpec("c", "bit", length=1), T.LongType()),
        (ColumnSpec("c", "datetime", scale=6), T.TimestampNTZType()),
        (ColumnSpec("c", "timestamp"), T.TimestampType()),
        (ColumnSpec("c", "time"), T.StringType()),
        (ColumnSpec("c", "year"), T.ShortType()),
        (ColumnSpec("c", "blob"), T.BinaryType()),
        (ColumnSpec("c", "set"), T.ArrayType(T.StringType())),
        (ColumnSpec("c", "json"), T.StringType()),
        (ColumnSpec("c", "geometry"), T.StringType()),
        (ColumnSpec("c", "inet6"), T.StringType()),
    ],
)
def test_spark_types(spec: ColumnSpec, expected: T.DataType) -> None:
    assert spark_type(spec) == expected


def test_columns_json_aliases_keys_and_errors() -> None:
    text = json.dumps([column("a", "INT", pk=True), column("b", "longtext"), column("c", "point")])
    schema = parse_columns(text)
    assert [c.type for c in schema.columns] == ["int", "text", "geometry"]
    assert schema.key == ["a"]
    assert schema.has_primary_key
    assert parse_columns(schema.to_json()) == schema
    no_key = parse_columns(json.dumps([column("a", "int"), column("b", "int")]))
    assert no_key.key == ["a", "b"]
    assert not no_key.has_primary_key
    with pytest.raises(SparkError, match="unreadable"):
        parse_columns("[]")
    with pytest.raises(SparkError, match="twice"):
        parse_columns(json.dumps([column("a", "int"), column("a", "int")]))
    with pytest.raises(UnsupportedColumnTypeError, match=r"db\.t\.v: column type 'vector'") as info:
        spark_type(ColumnSpec("v", "vector"), db="db", table="t")
    assert (info.value.column, info.value.type_name) == ("v", "vector")


def test_temporal_primary_key_columns_stay_text() -> None:
    for kind in ("date", "datetime", "timestamp"):
        assert spark_type(ColumnSpec("d", kind, pk=True)) == T.StringType()
        assert spark_type(ColumnSpec("d", kind)) != T.StringType()
