"""The Spark SQL ``MERGE INTO`` statements a mirror merge runs, and an empty mirror's struct.

Every name in them is a quoted identifier (:func:`.names.quote_identifier`); no value is
spliced into a statement. Tables without a primary key merge their row counts
(:mod:`.multiset`).
"""

from __future__ import annotations

from pyspark.sql import types as T  # noqa: N812 (the PySpark idiom)

from cdc_platform.spark import multiset
from cdc_platform.spark.locations import delta_ref
from cdc_platform.spark.names import quote_identifier
from cdc_platform.spark.plan import key_condition
from cdc_platform.spark.types import TableSchema, spark_type

__all__ = ["keyed_merge_sql", "mirror_struct", "multiset_merge_sql"]


def mirror_struct(target: TableSchema, db: str, table: str) -> T.StructType:
    """The mirror's Spark schema: the source table's columns, typed."""
    return T.StructType(
        [T.StructField(c.name, spark_type(c, db=db, table=table)) for c in target.columns]
    )


def keyed_merge_sql(uri: str, view: str, target: TableSchema) -> str:
    """MERGE of the newest change per key: delete, update the non-key columns, insert."""
    keys = set(target.key)
    names = target.names
    rest = [n for n in names if n not in keys]
    deleted = quote_identifier(target.engine.deleted)
    clauses = [f"WHEN MATCHED AND s.{deleted} THEN DELETE"]
    if rest:
        sets = ", ".join(f"t.{quote_identifier(n)} = s.{quote_identifier(n)}" for n in rest)
        clauses.append(f"WHEN MATCHED THEN UPDATE SET {sets}")
    columns = ", ".join(quote_identifier(n) for n in names)
    values = ", ".join(f"s.{quote_identifier(n)}" for n in names)
    # every name is a quoted identifier; no value is spliced into the statement
    insert = f"INSERT ({columns}) VALUES ({values})"  # noqa: S608 (Spark SQL of quoted identifiers, no user values)
    clauses.append(f"WHEN NOT MATCHED AND NOT s.{deleted} THEN {insert}")
    head = f"MERGE INTO {delta_ref(uri)} AS t USING {quote_identifier(view)} AS s "
    return head + f"ON {key_condition(target, 't', 's')} " + " ".join(clauses)


def multiset_merge_sql(uri: str, view: str, target: TableSchema) -> str:
    """MERGE of the net count change per distinct row (a table without a primary key)."""
    return multiset.merge_sql(delta_ref(uri), view, target)
