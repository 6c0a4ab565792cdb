"""What comparing one table with its mirror reports, and the bounds it works within.

:class:`TableComparison` is one table's result (its counts and the suspected keys, which
:mod:`cdc_platform.backfill.repair` re-reads); :class:`ChunkProgress` is reported after each
source chunk read; :class:`ComparisonBounds` carries the chunk sizes and the suspect limit
from the reconcile and snapshot settings.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from cdc_platform.backfill.repair import RepairKey, RepairTable
from cdc_platform.config.instance import DEFAULT_CHUNK_BYTES, SnapshotSettings
from cdc_platform.config.platform import ReconcileConfig

__all__ = ["ChunkProgress", "ComparisonBounds", "Status", "TableComparison"]

Status = Literal["compared", "no_mirror", "schema_differs"]


@dataclass(frozen=True, slots=True)
class ComparisonBounds:
    """How much one comparison reads and collects: source rows per checksum chunk
    (``reconcile.chunk_size``), column bytes per chunk (``snapshot.chunk_bytes``), and at most
    how many differing rows reach the driver as suspects (``reconcile.max_repairs_per_table``)."""

    chunk_size: int = 10_000
    chunk_bytes: int = DEFAULT_CHUNK_BYTES
    max_suspects: int = 100_000

    @classmethod
    def of(cls, reconcile: ReconcileConfig, snapshot: SnapshotSettings) -> ComparisonBounds:
        """The bounds a destination's settings give."""
        return cls(reconcile.chunk_size, snapshot.chunk_bytes, reconcile.max_repairs_per_table)


@dataclass(frozen=True, slots=True)
class ChunkProgress:
    """Reported after every source chunk read (the CLI prints it)."""

    table: str
    chunks: int
    rows: int
    seconds: float


@dataclass
class TableComparison:
    """What comparing one table found."""

    db: str
    table: str
    status: Status
    message: str = ""
    source_rows: int = 0
    mirror_rows: int = 0
    chunks: int = 0
    differing_chunks: int = 0
    missing_in_mirror: int = 0
    """Source rows the mirror does not have."""
    changed: int = 0
    """Rows both have, with different values."""
    extra_in_mirror: int = 0
    """Mirror rows the source does not have."""
    in_flight: int = 0
    """Keys left out because the change log has changes of them the mirror has not applied."""
    mirror_last_seq: int = 0
    seconds: float = 0.0
    suspects: list[RepairKey] = field(default_factory=list)

    @property
    def name(self) -> str:
        """``db.table``."""
        return f"{self.db}.{self.table}"

    @property
    def differences(self) -> int:
        """Rows found different (missing, changed or extra)."""
        return self.missing_in_mirror + self.changed + self.extra_in_mirror

    def repair_request(self) -> RepairTable:
        """The suspects as a request for :func:`~cdc_platform.backfill.repair.repair_keys`."""
        return RepairTable(self.db, self.table, list(self.suspects), self.mirror_last_seq)

    def summary(self) -> dict[str, Any]:
        """Plain figures (reports, Dagster metadata); no keys."""
        return {
            "table": self.name,
            "status": self.status,
            "message": self.message,
            "source_rows": self.source_rows,
            "mirror_rows": self.mirror_rows,
            "chunks": self.chunks,
            "differing_chunks": self.differing_chunks,
            "missing_in_mirror": self.missing_in_mirror,
            "changed": self.changed,
            "extra_in_mirror": self.extra_in_mirror,
            "in_flight": self.in_flight,
            "mirror_last_seq": self.mirror_last_seq,
            "seconds": round(self.seconds, 3),
        }
