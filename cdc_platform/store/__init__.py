"""The event store: a bounded ring buffer of change events between the source and the sink."""

from cdc_platform.config.batch_mode import BatchMode
from cdc_platform.store.batch import Batch, EventKey, PartialPutError, StoreClosedError, StoreStats
from cdc_platform.store.ring_buffer import EventStore

__all__ = [
    "Batch",
    "BatchMode",
    "EventKey",
    "EventStore",
    "PartialPutError",
    "StoreClosedError",
    "StoreStats",
]
