"""The event store: a bounded ring buffer of change events between the source and the sink."""

from cdc_platform.store.ring_buffer import (
    Batch,
    BatchMode,
    EventKey,
    EventStore,
    PartialPutError,
    StoreClosedError,
    StoreStats,
)

__all__ = [
    "Batch",
    "BatchMode",
    "EventKey",
    "EventStore",
    "PartialPutError",
    "StoreClosedError",
    "StoreStats",
]
