"""Running a destination: the pipeline wiring, its metrics, its lease supervisor."""

from cdc_platform.runtime.instance import DestinationRuntime, RunSummary, RuntimeMetrics

__all__ = ["DestinationRuntime", "RunSummary", "RuntimeMetrics"]
