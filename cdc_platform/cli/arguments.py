"""What several commands read from their arguments: the destination ``--destination``
names (its configuration loaded and checked) and the metrics endpoint ``--metrics-port``
asks for."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from cdc_platform.config import ConfigSet, Destination, load_config
from cdc_platform.errors import ConfigError

if TYPE_CHECKING:
    from cdc_platform.runtime.prometheus import PrometheusMetrics

__all__ = ["destination_of", "metrics_of"]


def destination_of(
    args: argparse.Namespace, *, check_secrets: bool = True
) -> tuple[ConfigSet, Destination]:
    """The configuration and the destination ``--destination`` names; ConfigError when
    it is unknown or its file is invalid."""
    config = load_config(Path(args.conf), check_secrets=check_secrets)
    if args.destination in config.errors:
        raise config.errors[args.destination]
    if args.destination not in config.destinations:
        known = ", ".join(sorted(config.destinations)) or "none"
        raise ConfigError(
            f"no destination {args.destination!r} under {Path(args.conf) / 'destinations'} "
            f"(known: {known})"
        )
    return config, config.destinations[args.destination]


def metrics_of(args: argparse.Namespace, config: ConfigSet) -> PrometheusMetrics | None:
    """The process's Prometheus endpoint if ``--metrics-port`` or ``metrics.port`` asks for
    one; its address is printed (and published for `status`). Without one, prometheus_client
    is never imported (about 12 MB of resident memory with what it imports)."""
    if args.metrics_port is None and config.platform.metrics.port is None:
        return None
    from cdc_platform.runtime.prometheus import open_metrics  # noqa: PLC0415 (light CLI)

    metrics = open_metrics(config.platform.metrics, port=args.metrics_port, host=args.metrics_host)
    if metrics is not None:
        print(f"metrics: {metrics.url}", flush=True)
    return metrics
