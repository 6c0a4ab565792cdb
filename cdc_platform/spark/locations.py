"""Where mirrors live, and the Delta table checks every mirror step needs.

``<lake_root>/<destination>/mirror`` holds one Delta table per source table
(``<db>.<table>``, names encoded by :func:`.names.location_name`), the state tables under
``_cdc_state/`` and the staging tables of running merges under ``_cdc_staging/``.

The lake may be a local directory or ``s3://bucket/prefix``: locations are joined as URIs,
and the checks here use the lake's storage options (``LakeFile``, delta-rs) the way the sink
does, so they see the same store Spark reads and writes.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from deltalake import DeltaTable
from pyspark.sql import SparkSession
from pyspark.sql import functions as F  # noqa: N812 (the PySpark idiom)

from cdc_platform.errors import MirrorError, SinkError
from cdc_platform.sink.destination_lake import DestinationLake
from cdc_platform.sink.lake_files import LakeFile, join_uri
from cdc_platform.spark.names import location_name, quote_identifier
from cdc_platform.spark.timeline import read_change_log

__all__ = [
    "STAGING_DIR",
    "STATE_DIR",
    "TableFacts",
    "delta_ref",
    "delta_version",
    "is_lake_uri",
    "local_path",
    "mirror_root",
    "mirror_tables",
    "mirror_uri",
    "require_change_log",
    "state_uri",
    "table_exists",
    "table_facts",
]

logger = logging.getLogger("cdc_platform.spark.mirror")


STATE_DIR = "_cdc_state"
"""Directory under the mirror root with one state table per mirror."""


STAGING_DIR = "_cdc_staging"
"""Directory under the mirror root for the newest-change-per-key tables merges read from."""


def mirror_root(lake_root: str | os.PathLike[str], destination: str) -> str:
    """``<lake_root>/<destination>/mirror``."""
    return DestinationLake.at(lake_root, destination).mirrors_root


def mirror_uri(root: str, db: str, table: str) -> str:
    """``<mirror_root>/<db>.<table>`` (names encoded by :func:`.names.location_name`)."""
    return f"{root.rstrip('/')}/{location_name(db, table)}"


def state_uri(root: str, db: str, table: str) -> str:
    """``<mirror_root>/_cdc_state/<db>.<table>`` (names encoded as for the mirror)."""
    return f"{root.rstrip('/')}/{STATE_DIR}/{location_name(db, table)}"


def local_path(uri: str) -> Path | None:
    """The local directory of ``uri``, or None for an object-store URI."""
    if uri.startswith("file://"):
        return Path(uri[len("file://") :])
    if "://" in uri:
        return None
    return Path(uri)


def is_lake_uri(uri: str) -> bool:
    """Whether :class:`LakeFile` speaks ``uri``'s storage (local, file://, s3://, s3a://)."""
    scheme = uri.split("://", 1)[0].lower() if "://" in uri else ""
    return scheme in ("", "file", "s3", "s3a")


def table_exists(
    spark: SparkSession, uri: str, storage_options: Mapping[str, str] | None = None
) -> bool:
    """Whether a Delta table is at ``uri``: a commit file in its ``_delta_log`` (looked up
    with the lake's storage options; other schemes are asked of Spark)."""
    if is_lake_uri(uri):
        log = LakeFile(join_uri(uri, "_delta_log"), storage_options)
        try:
            return bool(log.list(".json"))
        except SinkError as exc:
            raise MirrorError(f"looking for a Delta table at {log} failed: {exc}") from None
    try:
        spark.read.format("delta").load(uri).schema  # noqa: B018 (forces the lookup)
    except Exception as exc:  # engines differ; judge by the message
        text = str(exc).lower()
        markers = ("not found", "no commit files", "not a delta table", "path does not exist")
        if any(m in text for m in markers):
            return False
        raise
    return True


def delta_version(uri: str, storage_options: Mapping[str, str] | None = None) -> int | None:
    """The table's current version read with delta-rs, or None when that is not possible
    (Sail cannot run ``DESCRIBE HISTORY``; delta-rs reads local and object-store tables)."""
    try:
        return int(DeltaTable(uri, storage_options=dict(storage_options or {}) or None).version())
    except Exception as exc:  # any storage / table problem: the version is informational
        logger.debug("no Delta version for %s: %s", uri, exc)
        return None


@dataclass(frozen=True, slots=True)
class TableFacts:
    """What a Delta table's log says without reading its data."""

    version: int
    rows: int | None
    """Rows by the files' statistics; None when a file has none or the table may mark rows
    deleted without rewriting files (deletion vectors): then only a scan knows."""


def table_facts(uri: str, storage_options: Mapping[str, str] | None = None) -> TableFacts | None:
    """The table's version and row count from its log, read with delta-rs (no Spark job: on
    a JVM engine each count is a job of its own), or None when delta-rs cannot read it."""
    try:
        table = DeltaTable(uri, storage_options=dict(storage_options or {}) or None)
        version = int(table.version())
        features = set(table.protocol().reader_features or ())
        rows: int | None = None
        if "deletionVectors" not in features:
            counts = table.get_add_actions(flatten=True).column("num_records").to_pylist()
            rows = None if any(c is None for c in counts) else sum(int(c) for c in counts)
    except Exception as exc:  # any storage / table problem: the caller asks Spark instead
        logger.debug("no Delta log facts for %s: %s", uri, exc)
        return None
    return TableFacts(version, rows)


def delta_ref(uri: str) -> str:
    return "delta." + quote_identifier(uri)


def mirror_tables(
    spark: SparkSession, change_log_uri: str, storage_options: Mapping[str, str] | None = None
) -> list[tuple[str, str]]:
    """(db, table) of every table with row changes or DDL in the change log, sorted."""
    require_change_log(spark, change_log_uri, storage_options)
    rows = (
        read_change_log(spark, change_log_uri)
        .where(F.col("db").isNotNull() & F.col("table").isNotNull())
        .select("db", "table")
        .distinct()
        .collect()
    )
    return sorted((str(r["db"]), str(r["table"])) for r in rows)


def require_change_log(
    spark: SparkSession, change_log_uri: str, storage_options: Mapping[str, str] | None = None
) -> None:
    """MirrorError when there is no change-log table at ``change_log_uri`` yet."""
    if not table_exists(spark, change_log_uri, storage_options):
        raise MirrorError(f"no change log at {change_log_uri}: has the destination committed?")
