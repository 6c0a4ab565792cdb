"""The Delta sink: one Delta commit per batch, fenced by batch number and lease epoch."""

from cdc_platform.sink.commit import (
    CHANGE_LOG_FORMAT_VERSION,
    CommitResult,
    FencedCommitError,
)
from cdc_platform.sink.delta import DeltaChangeLog
from cdc_platform.sink.maintenance import MaintenancePolicy
from cdc_platform.sink.recovery import Checkpoint
from cdc_platform.sink.schema import CHANGE_LOG_SCHEMA, PARTITION_COLUMNS

__all__ = [
    "CHANGE_LOG_FORMAT_VERSION",
    "CHANGE_LOG_SCHEMA",
    "PARTITION_COLUMNS",
    "Checkpoint",
    "CommitResult",
    "DeltaChangeLog",
    "FencedCommitError",
    "MaintenancePolicy",
]
