"""Running a destination: the pipeline wiring, its metrics and its stop handling."""

from cdc_platform.runtime.instance import (
    CommitReport,
    DestinationRuntime,
    RunSummary,
    RuntimeMetrics,
)

__all__ = ["CommitReport", "DestinationRuntime", "RunSummary", "RuntimeMetrics"]
