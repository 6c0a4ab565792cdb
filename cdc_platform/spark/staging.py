"""The staging tables merges read from: where one goes, and their removal.

A merge writes the newest change per key to ``<mirror_root>/_cdc_staging/<db>.<table>/<id>``
first (the counts and the MERGE read it instead of the change log's JSON twice) and removes
it afterwards; leftovers of interrupted applies of the same mirror go once they are older
than :data:`STALE_STAGING_SECONDS`.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Mapping

from cdc_platform.errors import SinkError
from cdc_platform.sink.lake_files import LakeFile, join_uri
from cdc_platform.spark.locations import STAGING_DIR
from cdc_platform.spark.names import location_name

__all__ = ["FIRST_COMMIT", "STALE_STAGING_SECONDS", "remove_staging", "staging_uri"]

logger = logging.getLogger("cdc_platform.spark.mirror")


STALE_STAGING_SECONDS = 3600
"""Staging tables left by interrupted applies are removed after this long."""

FIRST_COMMIT = "00000000000000000000.json"
"""A staging table's only commit: its time is the table's age."""


def staging_uri(root: str, db: str, table: str) -> str:
    """A new staging table's URI for one merge of ``db.table``'s mirror."""
    return join_uri(root, STAGING_DIR, location_name(db, table), uuid.uuid4().hex)


def remove_staging(staging: str, storage_options: Mapping[str, str] | None) -> None:
    """Delete this apply's staging table, and the ones interrupted applies of the same mirror
    left more than :data:`STALE_STAGING_SECONDS` ago (local disk or object store alike)."""
    table = LakeFile(staging, storage_options)
    try:
        table.delete_tree()
        _remove_stale_staging(LakeFile(staging.rstrip("/").rsplit("/", 1)[0], storage_options))
    except (SinkError, OSError) as exc:  # a leftover staging table harms nothing
        logger.warning("staging table %s not removed: %s", table, exc)


def _remove_stale_staging(folder: LakeFile) -> None:
    """Remove the tables in ``folder`` whose first commit is older than the cutoff (an
    uncommitted leftover by its folder's age where the storage has folders: local disks)."""
    cutoff = time.time() - STALE_STAGING_SECONDS
    for name in folder.folders():
        leftover = folder.child(name)
        first = leftover.child("_delta_log", FIRST_COMMIT).modified() or leftover.modified()
        if first is not None and first < cutoff:
            leftover.delete_tree()
