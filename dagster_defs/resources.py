"""Resources: ``CdcResource`` over the engine (configuration, lake locations, the long-lived
pipeline, mirror applies and daily history through the engine's ``DestinationMirrors``,
reconciliation) and the Spark session.

The asset and op bodies stay thin: they ask ``CdcResource`` (resource key ``platform``) and turn
its answers into Dagster events. Where a destination's tables live is the engine's layout,
named here once (the translator names Dagster things only).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import date
from pathlib import Path

from dagster import ConfigurableResource, InitResourceContext
from pydantic import PrivateAttr
from pyspark.sql import SparkSession

from cdc_platform.config import ConfigSet, Destination, load_config, load_platform
from cdc_platform.config.loader import resolve_lake
from cdc_platform.reconcile.service import ReconcileReport, reconcile_destination
from cdc_platform.runtime.prometheus import open_metrics
from cdc_platform.runtime.supervised import supervised_destination
from cdc_platform.runtime.supervisor import LeaseSupervisor
from cdc_platform.sink.destination_lake import DestinationLake
from cdc_platform.sink.report import CommitReport
from cdc_platform.spark import (
    AppliedMirror,
    DailyHistory,
    DestinationMirrors,
    SparkSessionFactory,
    mirror_uri,
)

__all__ = [
    "CdcResource",
    "PlatformResource",
    "SparkResource",
    "change_log_uri",
    "default_conf_dir",
    "destination_root",
    "history_root",
    "mirror_location",
    "mirrors_root",
]


def destination_root(configset: ConfigSet, destination: str) -> str:
    """Everything the destination writes, under the lake root (a local path or ``s3://``)."""
    return DestinationLake(configset.lake, destination).root


def change_log_uri(configset: ConfigSet, destination: str) -> str:
    """The change-log table of a valid destination (KeyError for any other)."""
    return DestinationLake.of(configset, destination).change_log


def mirrors_root(configset: ConfigSet, destination: str) -> str:
    """Directory of the destination's mirror tables (one per captured table)."""
    return DestinationLake(configset.lake, destination).mirrors_root


def mirror_location(configset: ConfigSet, destination: str, db: str, table: str) -> str:
    """The mirror table of ``db.table`` (its ``dagster/uri``)."""
    return mirror_uri(mirrors_root(configset, destination), db, table)


def history_root(configset: ConfigSet, destination: str, day: date) -> str:
    """The destination's tables as of the end of ``day``."""
    return DestinationLake(configset.lake, destination).history_root(day)


def default_conf_dir() -> str:
    """`$CDC_CONF_DIR`, else `conf/` of the project this package was loaded from."""
    return os.environ.get("CDC_CONF_DIR") or str(Path(__file__).resolve().parents[1] / "conf")


class CdcResource(ConfigurableResource):  # type: ignore[type-arg]  # generic in the resource it yields; this one yields itself
    """The platform for Dagster bodies: its configuration (read when asked: a few small YAML
    files), its lake locations and the mirror applies."""

    conf_dir: str
    """Directory holding platform.yaml and destinations/<name>/instance.yaml."""

    def load(self) -> ConfigSet:
        """Read the configuration now (platform settings, every destination, valid or not)."""
        return load_config(Path(self.conf_dir))

    @contextmanager
    def supervise(
        self,
        configset: ConfigSet,
        destination: Destination,
        *,
        address: str,
        on_commit: Callable[[CommitReport], None],
    ) -> Iterator[tuple[LeaseSupervisor, str | None]]:
        """Run ``destination``'s pipeline under its lease (with its Prometheus endpoint when
        ``metrics.port`` is set): the supervisor, and the endpoint's URL."""
        metrics = open_metrics(configset.platform.metrics, any_port=True)
        with supervised_destination(
            configset,
            destination,
            address=address,
            on_commit=on_commit,
            metrics_interval_seconds=60.0,
            metrics=metrics,
        ) as supervisor:
            yield supervisor, metrics.url if metrics is not None else None

    def apply_mirrors(
        self,
        session: SparkSession,
        destination: str,
        tables: Sequence[tuple[str, str]],
        *,
        with_new_tables: bool = False,
    ) -> Iterator[AppliedMirror]:
        """:meth:`DestinationMirrors.apply` of the destination."""
        mirrors = DestinationMirrors.of(self.load(), destination, session)
        yield from mirrors.apply(tables, with_new_tables=with_new_tables)

    def daily_history(
        self,
        session: SparkSession,
        destination: str,
        day: date,
        tables: Sequence[tuple[str, str]],
    ) -> Iterator[DailyHistory]:
        """:meth:`DestinationMirrors.history` of the destination."""
        yield from DestinationMirrors.of(self.load(), destination, session).history(day, tables)

    def reconcile(
        self, session: SparkSession, destination: str, tables: Sequence[str]
    ) -> ReconcileReport:
        """Compare the ``db.table`` names with their mirrors and have the lease holder
        repair what differs (raises CdcError when the source or lake cannot be reached)."""
        return reconcile_destination(self.load(), destination, session, tables=list(tables))


PlatformResource = CdcResource
"""The former name of :class:`CdcResource` (same resource, key ``platform``)."""


class SparkResource(ConfigurableResource):  # type: ignore[type-arg]  # generic in the resource it yields; this one yields itself
    """The Spark session chosen by `spark:` in platform.yaml (embedded Sail by default).

    Its life is the execution's: set up with the Spark settings read when the execution starts,
    the session made on first use, stopped when the execution ends. No session outlives the
    run (or the test) that needed it, and a changed `spark:` takes effect with the next run.
    """

    conf_dir: str
    """Directory holding platform.yaml."""

    _factory: SparkSessionFactory | None = PrivateAttr(default=None)

    def setup_for_execution(self, context: InitResourceContext) -> None:
        """Read the Spark and lake settings; connects nothing yet."""
        conf_dir = Path(self.conf_dir)
        platform = load_platform(conf_dir)
        self._factory = SparkSessionFactory(platform.spark, resolve_lake(conf_dir, platform))

    def teardown_after_execution(self, context: InitResourceContext) -> None:
        """Stop the execution's session (the embedded engine stays up for the process)."""
        factory, self._factory = self._factory, None
        if factory is not None:
            factory.stop()

    def session(self) -> SparkSession:
        """The execution's session, made on first call (raises SparkSessionError naming why)."""
        if self._factory is None:
            raise RuntimeError("SparkResource.session() is available only while a step runs")
        return self._factory.session()
