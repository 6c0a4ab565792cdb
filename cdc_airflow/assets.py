"""Airflow assets of a destination, named by the lake's URIs: the one place they are spelled.

An asset's ``uri`` is where the table lives (a local path as ``file://``, or ``s3://...``), so
two Airflow deployments, or Airflow and Dagster, name the same table the same way; its
``name`` is the readable ``cdc/<destination>/...`` that Dagster's asset keys use too.
"""

from __future__ import annotations

from pathlib import Path

from airflow.sdk import Asset

from cdc_platform.config import ConfigSet
from cdc_platform.sink.destination_lake import DestinationLake
from cdc_platform.spark import mirror_root, mirror_uri

__all__ = [
    "change_log_asset",
    "history_asset",
    "history_uri",
    "lake_uri",
    "mirror_asset",
    "mirror_location",
]


def lake_uri(location: str) -> str:
    """A lake location as a URI: object-store URIs as they are, local paths as ``file://``."""
    if "://" in location:
        return location
    return Path(location).resolve().as_uri()


def change_log_asset(configset: ConfigSet, destination: str) -> Asset:
    """The destination's change log (``KeyError`` for an unknown or invalid destination)."""
    return Asset(
        name=f"cdc/{destination}/changes",
        uri=lake_uri(DestinationLake.of(configset, destination).change_log),
        group="cdc",
    )


def mirror_location(configset: ConfigSet, destination: str, db: str, table: str) -> str:
    """The mirror table of ``db.table`` (the engine's layout)."""
    return mirror_uri(mirror_root(configset.lake.uri, destination), db, table)


def mirror_asset(configset: ConfigSet, destination: str, db: str, table: str) -> Asset:
    """The mirror of ``db.table``."""
    return Asset(
        name=f"cdc/{destination}/{db}/{table}",
        uri=lake_uri(mirror_location(configset, destination, db, table)),
        group="cdc",
    )


def history_uri(configset: ConfigSet, destination: str, db: str, table: str, day: str) -> str:
    """Where ``db.table`` as of the end of ``day`` (ISO date) is written."""
    return mirror_uri(configset.lake.join(destination, "history", day), db, table)


def history_asset(destination: str, db: str, table: str) -> Asset:
    """The daily history of ``db.table``: one asset, one event per day built. Each day is its
    own table (:func:`history_uri`), so the asset is named, not located; the day and its
    table's URI are in the event's extra."""
    return Asset(name=f"cdc/{destination}/{db}/{table}/daily_history", group="cdc")
