"""Keeping commit latency flat over a long run: the policy and the tasks due after a commit.

Compaction, checkpoints, vacuum, log cleanup and reopening the table run in the committing
thread right after a commit, counted in that sink's commits; a failed task is logged and
retried on its next cadence, never raised, since the commit before it has already landed.
A compaction's files are merged by a thread beside the stream and committed after a later
commit (:mod:`cdc_platform.sink.compaction_beside`); the writer waits for it only at the next
compaction, before a vacuum (which would take its new files for orphans) and at close.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from deltalake import DeltaTable

from cdc_platform.sink.compaction import commit_compaction, discard, file_schema
from cdc_platform.sink.compaction_beside import PendingCompaction
from cdc_platform.sink.compaction_plan import plan_compaction
from cdc_platform.sink.lake_files import LakeFile
from cdc_platform.sink.schema import STATS_COLUMNS
from cdc_platform.sink.storage_errors import StorageGuard

__all__ = [
    "DEFAULT_LOG_RETENTION",
    "SAFE_LOG_RETENTION_SECONDS",
    "MaintenancePolicy",
    "TableMaintenance",
    "interval_seconds",
]

logger = logging.getLogger("cdc_platform.sink")

DEFAULT_LOG_RETENTION = "interval 15 minutes"
"""How long log cleanup keeps a commit file behind a newer checkpoint: well above any pause of
a writer between its refresh and its put (a GC, a stopped VM), which could otherwise land a
version number that cleanup has freed."""
SAFE_LOG_RETENTION_SECONDS = 600.0
"""A shorter log retention gets a warning (see :data:`DEFAULT_LOG_RETENTION`)."""

_INTERVAL = re.compile(r"^\s*interval\s+(\d+(?:\.\d+)?)\s+([a-z]+?)s?\s*$", re.IGNORECASE)
_UNIT_SECONDS = {
    "nanosecond": 1e-9,
    "microsecond": 1e-6,
    "millisecond": 1e-3,
    "second": 1.0,
    "minute": 60.0,
    "hour": 3600.0,
    "day": 86400.0,
    "week": 604800.0,
}


def interval_seconds(value: str) -> float | None:
    """Seconds of a Delta interval (``interval 15 minutes``); None when it is not one."""
    match = _INTERVAL.match(value)
    if match is None or match.group(2).lower() not in _UNIT_SECONDS:
        return None
    return float(match.group(1)) * _UNIT_SECONDS[match.group(2).lower()]


@dataclass(frozen=True, slots=True)
class MaintenancePolicy:
    """What keeps commit latency flat over a long run; tasks are counted in this sink's commits.

    Measured on delta-rs 1.6.6 (``bench/delta_commits.py``, notes in its docstring), each commit
    costs time in proportion to

    * the active data files (delta-rs re-reads every add action): compaction every
      ``compact_every`` commits keeps them few, and dropping statistics of the JSON columns
      (``stats_columns``) makes each one cheaper;
    * the files in ``_delta_log`` (~17 us each on a local file system, which lists the whole
      directory): a short ``log_retention`` lets delta-rs delete old commits at every
      checkpoint, with ``cleanup_every`` as a safety net;
    * the tombstones carried by each checkpoint: ``deleted_file_retention`` bounds them, and
      a full vacuum (which also removes orphans of commits that lost a race) deletes the files.

    ``compact_target_size`` bounds what one compaction rewrites: a compacted file is merged
    again with new small files until it reaches that size. The compaction is the sink's own
    fenced rewrite (:mod:`cdc_platform.sink.compaction`), not delta-rs's ``optimize``: it
    commits against the snapshot it read or not at all, so a holder paused inside it can never
    keep rows twice beside its successor's compaction. Never run delta-rs or Spark OPTIMIZE on
    the change log from outside: those are not fenced that way (delta-rs 1.6 commits two
    compactions of the same files both). The sink also skips a due compaction when someone else
    has committed since its own commit (a successor after a takeover), which saves the work.
    Checkpoints, log cleanup and vacuum by another process are safe (an append that loses a
    version to them is re-checked and retried).

    ``stats_columns``, ``checkpoint_interval``, ``log_retention`` and ``deleted_file_retention``
    are table properties, applied only when this sink creates the table. A short log retention
    means no time travel (``VERSION AS OF``) to versions older than it and no Delta streaming
    reader lagging by more (downstream readers use ``seq``); it must also stay well above any
    pause between a writer's refresh and its commit, since a writer whose snapshot is older
    than the retention could write a version number that cleanup has already freed (so the
    default is 15 minutes, and less than 10 gets a warning). The
    deleted-file retention is how long a reader may keep using an old snapshot before vacuum
    deletes its files. ``None`` disables a task (or keeps Delta's default for a property).
    """

    compact_every: int | None = 25
    compact_target_size: int | None = 2 * 1024 * 1024
    """Bytes; None uses the table's ``delta.targetFileSize`` (100 MB by default)."""
    compact_max_bytes: int | None = 8 * 1024 * 1024
    """Small files one compaction merges at most, in bytes (the oldest first; the rest at the
    next one): bounds the time and memory of one merge, e.g. after a snapshot's large chunks
    (25 chunk files of ~1.3 MB took 2.6-4 s to merge at once). The merge runs beside the
    stream; the writer waits for it only at the next due compaction, before a vacuum and at
    close. None: no cap."""
    checkpoint_every: int | None = None
    """Extra checkpoints; delta-rs already writes one every ``checkpoint_interval`` versions."""
    checkpoint_interval: int = 100
    vacuum_every: int | None = 1000
    vacuum_retention_hours: int | None = None
    """None: the table's ``delta.deletedFileRetentionDuration``."""
    vacuum_enforce_retention_duration: bool = True
    vacuum_full: bool = True
    cleanup_every: int | None = 100
    log_retention: str | None = DEFAULT_LOG_RETENTION
    """``delta.logRetentionDuration`` of a new table (Delta's default is 30 days); below
    :data:`SAFE_LOG_RETENTION_SECONDS` a warning says why it should not be."""
    deleted_file_retention: str | None = "interval 1 hour"
    """``delta.deletedFileRetentionDuration`` of a new table (Delta's default is 7 days)."""
    stats_columns: tuple[str, ...] | None = STATS_COLUMNS
    """``delta.dataSkippingStatsColumns`` of a new table (Delta's default: all columns)."""
    reopen_every: int | None = 100
    """Load the table afresh every so many commits: a long-lived DeltaTable object gets slower
    with every incremental update (measured without compaction: 14 -> 95 ms per commit over 600
    commits, a fresh object 31 ms; with compaction every 25 commits still ~10% more commits/s)."""

    def __post_init__(self) -> None:
        for name in (
            "compact_every",
            "checkpoint_every",
            "vacuum_every",
            "cleanup_every",
            "reopen_every",
        ):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"MaintenancePolicy.{name} must be >= 1 or None, not {value}")
        if self.checkpoint_interval < 1:
            raise ValueError("MaintenancePolicy.checkpoint_interval must be >= 1")
        if self.vacuum_retention_hours is not None and self.vacuum_retention_hours < 0:
            raise ValueError("MaintenancePolicy.vacuum_retention_hours must be >= 0")
        seconds = None if self.log_retention is None else interval_seconds(self.log_retention)
        if seconds is not None and seconds < SAFE_LOG_RETENTION_SECONDS:
            logger.warning(
                "log_retention %r is below %d minutes: a writer paused longer than that between "
                "refreshing the change log and committing could land a version that log cleanup "
                "has freed, past the fencing; keep it well above any pause (default %r)",
                self.log_retention,
                SAFE_LOG_RETENTION_SECONDS // 60,
                DEFAULT_LOG_RETENTION,
            )

    @classmethod
    def disabled(cls) -> MaintenancePolicy:
        """No maintenance by the sink and Delta's default table properties.

        delta-rs still writes a checkpoint every 100 versions.
        """
        return cls(
            compact_every=None,
            vacuum_every=None,
            cleanup_every=None,
            reopen_every=None,
            log_retention=None,
            deleted_file_retention=None,
            stats_columns=None,
        )

    def table_configuration(self) -> dict[str, str | None]:
        """Delta table properties for a table this sink creates."""
        config: dict[str, str | None] = {"delta.checkpointInterval": str(self.checkpoint_interval)}
        if self.log_retention is not None:
            config["delta.logRetentionDuration"] = self.log_retention
        if self.deleted_file_retention is not None:
            config["delta.deletedFileRetentionDuration"] = self.deleted_file_retention
        if self.stats_columns is not None:
            config["delta.dataSkippingStatsColumns"] = ",".join(self.stats_columns)
        return config


class TableMaintenance:
    """Runs the tasks of a :class:`MaintenancePolicy` that are due after a commit."""

    def __init__(
        self,
        policy: MaintenancePolicy,
        guard: StorageGuard,
        reopen: Callable[[], DeltaTable],
        storage_options: Mapping[str, str] | None = None,
    ) -> None:
        self.policy = policy
        self._guard = guard
        self._reopen = reopen
        self._storage_options = dict(storage_options) if storage_options else None
        self._pending: PendingCompaction | None = None

    def after_commit(self, table: DeltaTable, commits: int) -> DeltaTable | None:
        """Run what is due after commit number ``commits``; a failure is logged, never raised.

        Returns the table to go on with: ``table``, a freshly loaded one (``reopen_every``), or
        None after a failed task (reopen on the next commit rather than trust its state).
        """
        policy = self.policy
        current: DeltaTable | None = table

        def due(every: int | None) -> bool:
            return every is not None and commits % every == 0

        def run(name: str, task: Callable[[], object]) -> None:
            nonlocal current
            if not self._run_task(name, task):
                current = None

        def reopen() -> None:
            nonlocal current
            current = self._reopen()

        pending = self._pending
        if pending is not None:
            pending.follow(table.version())
        if due(policy.compact_every):
            run("compaction", lambda: self._compact(table))
        if due(policy.checkpoint_every):
            run("checkpoint", table.create_checkpoint)
        if due(policy.cleanup_every):
            run("log cleanup", table.cleanup_metadata)
        if due(policy.vacuum_every):
            if self._pending is not None:  # its new files are not in the log yet
                run("compaction commit", lambda: self._settle(table))
            run(
                "vacuum",
                lambda: table.vacuum(
                    retention_hours=policy.vacuum_retention_hours,
                    dry_run=False,
                    enforce_retention_duration=policy.vacuum_enforce_retention_duration,
                    full=policy.vacuum_full,
                ),
            )
        # after the checkpoint and the log cleanup: they work up to the table's version, and
        # on the compaction's they would clean this commit's file, with its resume position
        if self._pending is not None and self._pending.done:
            run("compaction commit", lambda: self._settle(table))
        if due(policy.reopen_every) and current is not None:
            run("reopen", reopen)
        return current

    def close(self, table: DeltaTable | None) -> None:
        """Commit the compaction written beside the stream, if any, on ``table`` (the writer's
        newest version); without a table, delete its files. Waits for its thread."""
        pending = self._pending
        if pending is None:
            return
        if table is None:
            self._pending = None
            pending.abandon()
            return
        self._run_task("compaction commit", lambda: self._settle(table))

    def _compact(self, table: DeltaTable) -> bool:
        """Plan a compaction of the small files and start merging them beside the stream
        (:mod:`cdc_platform.sink.compaction_beside`), after committing the previous one.

        Skipped, cheaply, once anyone else has committed since this sink's commit (a successor
        after a takeover, or an outside process); a commit by anyone between the plan and the
        compaction's own commit makes it lose cleanly. Returns False when the table object
        should be reloaded.
        """
        trusted = self._settle(table) if self._pending is not None else True
        guard = self._guard
        version = table.version()
        table.update_incremental()
        if table.version() != version:
            logger.info(
                "%s: compaction of %s skipped: version %d was committed by someone else",
                guard.destination,
                guard.redact.uri,
                table.version(),
            )
            return trusted
        target = self.policy.compact_target_size
        plan = plan_compaction(table, target, self.policy.compact_max_bytes)
        if plan is None:
            return trusted
        root = LakeFile(table.table_uri, self._storage_options)
        name = f"cdc-compaction-{guard.destination}"
        self._pending = PendingCompaction(root, plan, file_schema(table), name=name)
        return trusted

    def _settle(self, table: DeltaTable) -> bool:
        """Commit the pending compaction's files on ``table``, waiting for its thread; False
        when it lost to someone else's commit (nothing changed; reload the table)."""
        pending, self._pending = self._pending, None
        if pending is None:
            return True
        written = pending.written()  # SinkError: the merge failed, its files are deleted
        guard, plan = self._guard, pending.plan
        try:  # until the commit is tried, the new files are in no commit: delete them on error
            table.update_incremental()  # commits by another writer since this one's: checked
            version = table.version()
            safe = pending.safe_on(version)
        except BaseException:
            discard(written)
            raise
        if safe:
            metadata = {
                "cdc.operation": "compaction",
                "cdc.destination.compacted": guard.destination,
            }
            if commit_compaction(
                table,
                plan,
                written,
                storage_options=self._storage_options,
                metadata=metadata,
                base_version=version,
            ):
                logger.debug(
                    "%s: compacted %d files (%d rows) of %s",
                    guard.destination,
                    plan.files,
                    plan.rows,
                    guard.redact.uri,
                )
                return True
        else:
            discard(written)
        logger.info(
            "%s: compaction of %s lost a commit race (a commit after version %d removed "
            "files, or someone committed after version %d); skipped, nothing changed",
            guard.destination,
            guard.redact.uri,
            plan.version,
            version,
        )
        return False

    def _run_task(self, name: str, task: Callable[[], object]) -> bool:
        guard = self._guard
        started = time.perf_counter()
        try:
            trusted = task() is not False  # False: done, but reload the table object
        except Exception as exc:  # maintenance must never fail a commit
            logger.warning(
                "%s: %s of %s failed (the commit is safe; will retry on the next cadence): %s",
                guard.destination,
                name,
                guard.redact.uri,
                guard.redact(f"{type(exc).__name__}: {exc}"),
            )
            return False
        logger.debug("%s: %s took %.3f s", guard.destination, name, time.perf_counter() - started)
        return trusted
