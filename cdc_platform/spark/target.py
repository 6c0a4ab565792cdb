"""Which mirror of which change log: the one value an apply and an as-of build take.

A mirror is named by its change log, the folder of the destination's mirrors and the source
table; the lake's storage options travel with them (delta-rs and the existence checks need
them on object storage), and so does how the mirror holds dates. One frozen value instead of
six loose arguments threaded through every step.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from cdc_platform.sink.destination_lake import DestinationLake
from cdc_platform.spark.locations import mirror_uri
from cdc_platform.spark.types import ZeroDates

__all__ = ["MirrorTarget"]


@dataclass(frozen=True, slots=True)
class MirrorTarget:
    """The mirror of ``db.table`` kept from ``change_log`` under ``mirror_root``."""

    change_log: str
    """The change-log table's URI."""
    mirror_root: str
    """The folder of the destination's mirrors (:attr:`DestinationLake.mirrors_root`)."""
    db: str
    table: str
    storage_options: Mapping[str, str] | None = None
    """The lake's (``config.lake``): delta-rs and the existence checks use them; Spark reads
    the same store itself."""
    zero_dates: ZeroDates = "string"
    """How the mirror holds DATE/DATETIME/TIMESTAMP columns (``ZeroDates``: ``string``, the
    change log's text, so zero and partial dates round-trip; ``null``, typed, those values
    null). Changing it rebuilds the mirror at its next apply."""

    @classmethod
    def of(cls, lake: DestinationLake, db: str, table: str) -> MirrorTarget:
        """The mirror of ``db.table`` in the destination's lake."""
        return cls(lake.change_log, lake.mirrors_root, db, table, lake.storage_options)

    @property
    def uri(self) -> str:
        """The mirror table's URI (:func:`.locations.mirror_uri`)."""
        return mirror_uri(self.mirror_root, self.db, self.table)
