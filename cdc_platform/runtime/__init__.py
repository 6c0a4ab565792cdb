"""Running a destination: the pipeline wiring, its metrics, its lease supervisor."""

from cdc_platform.runtime.instance import DestinationRuntime, RunSummary
from cdc_platform.runtime.runtime_metrics import RuntimeMetrics

__all__ = ["DestinationRuntime", "RunSummary", "RuntimeMetrics"]
