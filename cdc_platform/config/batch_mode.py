"""The ring buffer's batch mode: a setting of the configuration that the store obeys."""

from __future__ import annotations

from enum import StrEnum

__all__ = ["BatchMode"]


class BatchMode(StrEnum):
    """What ``batch_size`` counts and what, besides slots, limits the store (Canal's batch.mode)."""

    ITEMSIZE = "ITEMSIZE"
    """Batches of ``batch_size`` events; only the slot count limits the store."""
    MEMSIZE = "MEMSIZE"
    """Batches of ``batch_size * memunit`` bytes; the store also holds at most
    ``buffer_size * memunit`` bytes."""
