"""Where a destination's tables and files are in the lake: one value names them all.

Everything a destination writes sits under ``<lake_root>/<destination>/``:

* ``<sink.table>/``: the change log (a Delta table);
* ``mirror/``: one Delta table per captured table (:mod:`cdc_platform.spark`);
* ``history/<day>/``: the tables as of the end of a day (the Dagster history assets);
* ``_snapshot_state.json``: a snapshot's progress (:mod:`.snapshot_state`);
* ``_captured_tables.json``: the tables the change log holds completely;
* ``_reread_tables.json``: the tables waiting for a re-read after DDL;
* ``_start.json``: the start the destination began with (:mod:`.start_record`);
* ``_snapshot_requests/`` and ``_reconcile/``: the request inboxes of the lease holder.

Every reader and writer builds its paths from a :class:`DestinationLake` (built once from the
configuration with :meth:`DestinationLake.of`), so the layout is spelled here only; the value
carries the lake's storage options and opens the change log and the side files itself. It sits
at the sink, the lowest layer that reads or writes these files (the configuration beneath it
only knows the lake's location).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date

from cdc_platform.config.instance import InstanceConfig, SinkConfig
from cdc_platform.config.lake import LakeLocation
from cdc_platform.config.loader import ConfigSet
from cdc_platform.sink.delta import DeltaChangeLog
from cdc_platform.sink.lake_files import LakeFile
from cdc_platform.sink.maintenance import MaintenancePolicy

__all__ = ["DEFAULT_CHANGE_LOG", "DestinationLake"]

DEFAULT_CHANGE_LOG: str = SinkConfig.model_fields["table"].default
"""The change log's folder when the destination's config does not name one."""


@dataclass(frozen=True)
class DestinationLake:
    """The lake layout of one destination; see the module docstring.

    ``lake``: the lake location (its URI and storage options); ``destination``: the
    destination's name; ``change_log_table``: the change log's folder (``sink.table``).
    """

    lake: LakeLocation
    destination: str
    change_log_table: str = DEFAULT_CHANGE_LOG

    @classmethod
    def of(cls, configset: ConfigSet, destination: str) -> DestinationLake:
        """The layout of a configured ``destination`` in the configured lake."""
        return cls.in_lake(configset.lake, destination, configset.destinations[destination].config)

    @classmethod
    def in_lake(
        cls, lake: LakeLocation, destination: str, config: InstanceConfig | None = None
    ) -> DestinationLake:
        """The layout of ``destination`` in ``lake`` (``config``: where its change log is)."""
        table = config.sink.table if config is not None else DEFAULT_CHANGE_LOG
        return cls(lake, destination, table)

    @classmethod
    def at(
        cls,
        lake_root: str | os.PathLike[str],
        destination: str,
        storage_options: Mapping[str, str] | None = None,
    ) -> DestinationLake:
        """The layout under a lake root given as a path or URI (no resolving: as it is)."""
        return cls(LakeLocation(os.fspath(lake_root), dict(storage_options or {})), destination)

    @property
    def storage_options(self) -> dict[str, str] | None:
        """The lake's storage options as delta-rs and :class:`LakeFile` take them."""
        return self.lake.delta_options()

    @property
    def root(self) -> str:
        """``<lake_root>/<destination>``: everything the destination writes."""
        return self.lake.join(self.destination)

    @property
    def change_log(self) -> str:
        """The change-log table's URI."""
        return self.lake.join(self.destination, self.change_log_table)

    def open_change_log(self, maintenance: MaintenancePolicy | None = None) -> DeltaChangeLog:
        """The change log, with the lake's storage options (``maintenance``: None, the defaults)."""
        return DeltaChangeLog(
            self.change_log,
            self.destination,
            storage_options=self.storage_options,
            maintenance=maintenance or MaintenancePolicy(),
        )

    @property
    def mirrors_root(self) -> str:
        """The folder of the mirror tables (one per captured table)."""
        return self.lake.join(self.destination, "mirror")

    def history_root(self, day: date) -> str:
        """The folder of the tables as of the end of ``day``."""
        return self.lake.join(self.destination, "history", day.isoformat())

    def _file(self, name: str) -> LakeFile:
        return LakeFile(self.lake.join(self.destination, name), self.storage_options)

    @property
    def snapshot_state(self) -> LakeFile:
        """A snapshot's progress, so any node can finish a snapshot another one began."""
        return self._file("_snapshot_state.json")

    @property
    def captured_tables(self) -> LakeFile:
        """The tables the change log holds completely (a snapshot or from their CREATE)."""
        return self._file("_captured_tables.json")

    @property
    def reread_tables(self) -> LakeFile:
        """The tables waiting for a re-read after DDL."""
        return self._file("_reread_tables.json")

    @property
    def start_record(self) -> LakeFile:
        """The start the destination began with."""
        return self._file("_start.json")

    @property
    def snapshot_inbox(self) -> str:
        """The folder of snapshot requests and their results."""
        return self.lake.join(self.destination, "_snapshot_requests")

    @property
    def repair_inbox(self) -> str:
        """The folder of repair requests and their results (and the reconciliation's staging)."""
        return self.lake.join(self.destination, "_reconcile")
