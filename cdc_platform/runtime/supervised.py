"""``supervised_destination``: the one place that wires a lease-gated destination from the
platform config (lease, registry, state publisher, side work), for `cdc-platform run`,
`serve` and the Dagster run."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from cdc_platform.backfill.request_inbox import holder_inbox
from cdc_platform.backfill.snapshot import SnapshotProgress
from cdc_platform.config.deployment import check_deployment
from cdc_platform.config.loader import ConfigSet, Destination
from cdc_platform.coordination.factory import open_lease, open_registry, open_state_store
from cdc_platform.infra.recorder import NULL_RECORDER
from cdc_platform.runtime.holder_status import StatusChannels
from cdc_platform.runtime.instance import DestinationRuntime
from cdc_platform.runtime.side_work import SideWork
from cdc_platform.runtime.supervisor import LeaseSupervisor
from cdc_platform.sink.destination_lake import DestinationLake
from cdc_platform.sink.lake_check import check_lake
from cdc_platform.sink.report import CommitReport
from cdc_platform.sink.term import WriteTerm
from cdc_platform.watch.publisher import StatePublisher

if TYPE_CHECKING:  # prometheus_client is imported only for an endpoint a process serves
    from cdc_platform.runtime.prometheus import PrometheusMetrics

__all__ = ["supervised_destination"]


@contextmanager
def supervised_destination(  # noqa: PLR0913 (the CLI's and the Dagster run's options, keyword-only)
    config: ConfigSet,
    destination: Destination,
    *,
    address: str | None = None,
    on_commit: Callable[[CommitReport], None] | None = None,
    metrics_interval_seconds: float = 10.0,
    on_snapshot_progress: Callable[[SnapshotProgress], None] | None = None,
    metrics: PrometheusMetrics | None = None,
) -> Iterator[LeaseSupervisor]:
    """A LeaseSupervisor wired from the platform config (lease, registry, state publisher).

    The one place that builds a lease-gated destination, for `cdc-platform run` and the Dagster
    run alike; everything it opened is closed on exit. Settings no writer may start with (a
    lake on object storage with a local SQLite lease) raise ConfigError before anything opens.
    ``metrics``: the process's Prometheus endpoint, if it serves one: it hears the
    destination's figures, and its URL is published for `status`.
    """
    platform = config.platform
    lake = config.lake
    check_deployment(config)  # a shared lake with a local lease: two writers, no fence
    check_lake(lake)  # bad input fails here, naming the URI and the cause
    registry = open_registry(platform, config.conf_dir)
    publisher: StatePublisher | None = None
    try:
        lease = open_lease(
            platform, config.conf_dir, destination.name, address=address, registry=registry
        )
        publisher = StatePublisher(
            open_state_store(platform, config.conf_dir),
            interval=platform.watch.publish_interval_seconds,
        )

        def runtime(term: WriteTerm) -> DestinationRuntime:
            return DestinationRuntime(term, metrics_interval_seconds=metrics_interval_seconds)

        name = destination.name
        # Requests (repairs, snapshots) and snapshot progress live in the lake: any node can
        # continue them.
        side_work = SideWork(
            inbox=holder_inbox(DestinationLake.of(config, name), destination.config.source),
            lake_root=lake.uri,
            on_snapshot_progress=on_snapshot_progress,
        )
        recorder = metrics.recorder(name) if metrics is not None else NULL_RECORDER
        yield LeaseSupervisor(
            WriteTerm.in_lake(
                name, destination.config, lake, on_commit=on_commit, recorder=recorder
            ),
            lease,
            channels=StatusChannels(
                publisher=publisher,
                registry=registry,
                config_hash=destination.content_hash,
                metrics_url=metrics.url if metrics is not None else None,
            ),
            runtime_factory=runtime,
            side_work=side_work,
        )
    finally:
        if publisher is not None:
            publisher.close(timeout=2.0)
            publisher.store.close()
        if registry is not None:
            registry.db.close()
