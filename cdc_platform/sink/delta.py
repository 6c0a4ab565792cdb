"""The change-log Delta table of one destination, written with delta-rs (no Spark).

One :meth:`DeltaChangeLog.commit` is one Delta commit. The commit itself is the checkpoint:
it carries three app transactions (``txn`` actions), whose latest versions Delta keeps in every
checkpoint forever, so the fencing facts never depend on ``commitInfo`` (which log cleanup
drops):

* ``<destination>`` = batch_seq of the commit (the last batch committed),
* ``<destination>#epoch`` = HA lease epoch of the writer (the highest epoch that committed),
* ``<destination>#seq`` = seq of the last row written so far (0 before the first row).

The resume position is in the commit's custom metadata (``cdc.resume_position``) and on the
last row of every commit that has rows; after cleanup the row with the highest seq gives it.

Fencing is atomic with the commit: the fencing facts are read from the snapshot the commit is
made against, and the commit runs with ``max_commit_retries=0``, so delta-rs cannot silently
rebase it onto a newer version (it would: FACTS.md). If someone else committed in between,
delta-rs raises ``CommitFailedError``; the snapshot is refreshed, the facts re-checked and the
commit retried (bounded).

Table layout and column meaning: :mod:`cdc_platform.sink.schema`.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit
from uuid import uuid4

import pyarrow as pa
from deltalake import DeltaTable, QueryBuilder, write_deltalake
from deltalake.exceptions import CommitFailedError, DeltaError, TableNotFoundError
from deltalake.transaction import CommitProperties, Transaction

from cdc_platform.errors import CheckpointError, CommitRefusedError, SinkError
from cdc_platform.events import EVENT_FORMAT_VERSION, ChangeEvent, ResumePosition
from cdc_platform.sink.schema import (
    CHANGE_LOG_SCHEMA,
    PARTITION_COLUMNS,
    STATS_COLUMNS,
    events_to_table,
    row_events,
)

__all__ = [
    "CHANGE_LOG_FORMAT_VERSION",
    "Checkpoint",
    "CommitResult",
    "DeltaChangeLog",
    "FencedCommitError",
    "MaintenancePolicy",
]

logger = logging.getLogger("cdc_platform.sink")

CHANGE_LOG_FORMAT_VERSION = 1
"""Version of the change-log layout (columns, app ids, metadata keys); in every commit."""

COMMIT_ATTEMPTS = 5
"""Commits tried per call when others keep committing in between (each re-checks fencing)."""

_HISTORY_LOOKBACK = 50
"""Commits read back by :meth:`DeltaChangeLog.recover` to find the newest commit's metadata."""

_LIBRARY_ERRORS: tuple[type[BaseException], ...] = (
    DeltaError,
    OSError,
    pa.ArrowException,
    RuntimeError,
)
"""What delta-rs and pyarrow raise for I/O and table trouble; re-raised as SinkError."""

_SECRET_KEY = re.compile(r"secret|key|token|password|passwd|credential|sas|signature|auth", re.I)

T = TypeVar("T")


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
    again with new small files until it reaches that size. Bigger files (fewer, cheaper per
    commit over months) are for a separate, scheduled OPTIMIZE; the sink tolerates it (an
    OPTIMIZE landing between its refresh and its commit costs one retry).

    ``stats_columns``, ``checkpoint_interval``, ``log_retention`` and ``deleted_file_retention``
    are table properties, applied only when this sink creates the table. A short log retention
    means no time travel (``VERSION AS OF``) to versions older than it and no Delta streaming
    reader lagging by more (downstream readers use ``seq``); it must also stay well above any
    pause between a writer's refresh and its commit, since a writer whose snapshot is older
    than the retention could write a version number that cleanup has already freed. The
    deleted-file retention is how long a reader may keep using an old snapshot before vacuum
    deletes its files. ``None`` disables a task (or keeps Delta's default for a property).
    """

    compact_every: int | None = 25
    compact_target_size: int | None = 2 * 1024 * 1024
    """Bytes; None uses the table's ``delta.targetFileSize`` (100 MB by default)."""
    checkpoint_every: int | None = None
    """Extra checkpoints; delta-rs already writes one every ``checkpoint_interval`` versions."""
    checkpoint_interval: int = 100
    vacuum_every: int | None = 1000
    vacuum_retention_hours: int | None = None
    """None: the table's ``delta.deletedFileRetentionDuration``."""
    vacuum_enforce_retention_duration: bool = True
    vacuum_full: bool = True
    cleanup_every: int | None = 100
    log_retention: str | None = "interval 1 minute"
    """``delta.logRetentionDuration`` of a new table (Delta's default is 30 days)."""
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


@dataclass(frozen=True, slots=True)
class CommitResult:
    """What one commit landed. With no rows, ``first_seq == last_seq + 1`` (an empty range)."""

    version: int
    rows: int
    first_seq: int
    last_seq: int
    seconds: float
    """Wall time from refreshing the snapshot to the commit landing (maintenance excluded)."""


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """Where a destination resumes: read from the change log by :meth:`DeltaChangeLog.recover`."""

    batch_seq: int
    """Last committed batch; the next batch must be larger."""
    epoch: int
    """Highest lease epoch that committed; a writer needs at least this epoch."""
    last_seq: int
    """seq of the last row; the next row gets ``last_seq + 1`` (0: no rows yet)."""
    resume: ResumePosition
    version: int
    """Table version the checkpoint was read at."""


class FencedCommitError(CommitRefusedError):
    """The table already holds this batch (or a later one) or a commit from a newer epoch.

    Keeps the refused commit's ``batch_seq`` and ``epoch`` and what the table holds, so the
    caller can act without parsing the message.
    """

    def __init__(
        self,
        message: str,
        *,
        batch_seq: int,
        epoch: int,
        table_batch_seq: int | None,
        table_epoch: int | None,
    ) -> None:
        super().__init__(message)
        self.batch_seq = batch_seq
        self.epoch = epoch
        self.table_batch_seq = table_batch_seq
        self.table_epoch = table_epoch


@dataclass(frozen=True, slots=True)
class _Fence:
    batch_seq: int | None
    epoch: int | None
    last_seq: int


class _Redactor:
    """Removes storage secrets (and credentials embedded in the URI) from text we show."""

    def __init__(self, table_uri: str, storage_options: dict[str, str] | None) -> None:
        secrets: set[str] = set()
        for key, value in (storage_options or {}).items():
            if value and (len(value) >= 8 or _SECRET_KEY.search(key)):
                secrets.add(value)
        parts = urlsplit(table_uri)
        if parts.password:
            secrets.add(parts.password)
        if parts.query:
            secrets.add(parts.query)
        self._secrets = sorted(secrets, key=len, reverse=True)
        netloc = parts.netloc.rsplit("@", 1)[-1]
        if "@" in parts.netloc:
            netloc = "***@" + netloc
        self.uri = urlunsplit((parts.scheme, netloc, parts.path, "***" if parts.query else "", ""))

    def __call__(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text

    def cause(self, exc: BaseException) -> BaseException:
        """``exc``, or a copy of it with the secrets removed when its message holds one."""
        text = str(exc)
        clean = self(text)
        if clean == text:
            return exc
        try:
            copy = type(exc)(clean)
        except Exception:  # any constructor problem: fall back to a plain error
            copy = RuntimeError(f"{type(exc).__name__}: {clean}")
        return copy.with_traceback(exc.__traceback__)


class DeltaChangeLog:
    """Append-only change log of one destination in one Delta table, fenced by batch and epoch.

    Keeps one ``DeltaTable`` open and brings it up to date (``update_incremental``) before each
    commit, the cheapest way to commit against the latest snapshot; it is loaded afresh every
    ``MaintenancePolicy.reopen_every`` commits because a long-lived object slows down. Calls
    are serialised by a lock; use one object per writer.
    """

    def __init__(
        self,
        table_uri: str,
        destination: str,
        *,
        storage_options: dict[str, str] | None = None,
        maintenance: MaintenancePolicy = MaintenancePolicy(),
    ) -> None:
        if not destination:
            raise ValueError("destination must not be empty")
        self._uri = table_uri
        self._destination = destination
        self._storage_options = dict(storage_options) if storage_options else None
        self._policy = maintenance
        self._redact = _Redactor(table_uri, self._storage_options)
        self._table: DeltaTable | None = None
        self._lock = threading.Lock()
        self._commits = 0
        self._writer_id = uuid4().hex

    def __repr__(self) -> str:
        keys = sorted(self._storage_options or {})
        return (
            f"DeltaChangeLog(table_uri={self._redact.uri!r}, destination={self._destination!r}, "
            f"storage_options=<{len(keys)} keys: {', '.join(keys)}>)"
        )

    @property
    def destination(self) -> str:
        """The destination whose app ids and seq this log carries."""
        return self._destination

    @property
    def table_uri(self) -> str:
        """The table URI, with any embedded credentials masked."""
        return self._redact.uri

    @property
    def maintenance(self) -> MaintenancePolicy:
        """The maintenance policy in force."""
        return self._policy

    # -- commit ------------------------------------------------------------------------------

    def commit(
        self,
        events: Sequence[ChangeEvent],
        *,
        batch_seq: int,
        resume: ResumePosition,
        epoch: int,
    ) -> CommitResult:
        """Append one batch as one Delta commit, or refuse it if a newer writer or batch exists.

        ROW and DDL events become rows; COMMIT events none. A batch without rows still commits
        (no data files) so the checkpoint moves past filtered traffic.

        Raises:
            FencedCommitError: (a CommitRefusedError) the table holds ``batch_seq`` or a later
                batch, or a commit from an epoch newer than ``epoch``. Not transient.
            SinkError: storage or delta-rs trouble, or too many concurrent commits; transient.
        """
        if batch_seq < 1:
            raise ValueError(f"batch_seq must be >= 1, not {batch_seq}")
        if epoch < 0:
            raise ValueError(f"epoch must be >= 0, not {epoch}")
        rows = row_events(events)
        with self._lock:
            result = self._commit_locked(rows, batch_seq=batch_seq, resume=resume, epoch=epoch)
            self._commits += 1
            self._maintain()
        return result

    def _commit_locked(
        self,
        rows: Sequence[ChangeEvent],
        *,
        batch_seq: int,
        resume: ResumePosition,
        epoch: int,
    ) -> CommitResult:
        conflict: CommitFailedError | None = None
        for attempt in range(1, COMMIT_ATTEMPTS + 1):
            started = time.perf_counter()
            # Always refresh, even after our own commit (~2 ms when nothing changed): with a
            # short log retention, the commit file after a long-stale snapshot may already be
            # cleaned, and delta-rs would then write that version again without a conflict.
            table = self._current_table(create=True)
            assert table is not None  # create=True never returns None
            fence = self._read_fence(table)
            self._check_fence(fence, batch_seq=batch_seq, epoch=epoch)
            first_seq = fence.last_seq + 1
            last_seq = fence.last_seq + len(rows)
            data = events_to_table(
                rows,
                first_seq=first_seq,
                batch_seq=batch_seq,
                epoch=epoch,
                resume=resume,
                committed_at=datetime.now(UTC),
            )
            properties = self._commit_properties(
                batch_seq=batch_seq,
                epoch=epoch,
                resume=resume,
                first_seq=first_seq,
                last_seq=last_seq,
                rows=len(rows),
            )
            try:
                write_deltalake(table, data, mode="append", commit_properties=properties)
            except CommitFailedError as exc:
                conflict = exc
                logger.info(
                    "%s: batch %d lost a commit race (attempt %d/%d); re-checking fencing",
                    self._destination,
                    batch_seq,
                    attempt,
                    COMMIT_ATTEMPTS,
                )
                time.sleep(0.01 * attempt)
                continue
            except _LIBRARY_ERRORS as exc:
                self._table = None  # reopen next time: the object may be half-updated
                raise self._sink_error(f"commit of batch {batch_seq} failed", exc) from (
                    self._redact.cause(exc)
                )
            version = table.version()
            return CommitResult(
                version=version,
                rows=len(rows),
                first_seq=first_seq,
                last_seq=last_seq,
                seconds=time.perf_counter() - started,
            )
        assert conflict is not None
        raise SinkError(
            f"{self._destination}: batch {batch_seq} lost {COMMIT_ATTEMPTS} commit races in a "
            f"row on {self._redact.uri}; another process keeps committing to this change log"
        ) from self._redact.cause(conflict)

    def _commit_properties(
        self,
        *,
        batch_seq: int,
        epoch: int,
        resume: ResumePosition,
        first_seq: int,
        last_seq: int,
        rows: int,
    ) -> CommitProperties:
        dest = self._destination
        return CommitProperties(
            custom_metadata={
                "cdc.format_version": CHANGE_LOG_FORMAT_VERSION,
                "cdc.event_format_version": EVENT_FORMAT_VERSION,
                "cdc.destination": dest,
                "cdc.batch_seq": batch_seq,
                "cdc.epoch": epoch,
                "cdc.resume_position": resume.to_json(),
                "cdc.first_seq": first_seq,
                "cdc.last_seq": last_seq,
                "cdc.rows": rows,
                "cdc.writer": self._writer_id,
            },
            app_transactions=[
                Transaction(app_id=dest, version=batch_seq),
                Transaction(app_id=f"{dest}#epoch", version=epoch),
                Transaction(app_id=f"{dest}#seq", version=last_seq),
            ],
            max_commit_retries=0,
        )

    def _read_fence(self, table: DeltaTable) -> _Fence:
        dest = self._destination
        try:
            return _Fence(
                batch_seq=table.transaction_version(dest),
                epoch=table.transaction_version(f"{dest}#epoch"),
                last_seq=table.transaction_version(f"{dest}#seq") or 0,
            )
        except _LIBRARY_ERRORS as exc:
            self._table = None
            raise self._sink_error("reading the fencing state failed", exc) from (
                self._redact.cause(exc)
            )

    def _check_fence(self, fence: _Fence, *, batch_seq: int, epoch: int) -> None:
        dest = self._destination
        if fence.epoch is not None and fence.epoch > epoch:
            raise FencedCommitError(
                f"{dest}: refused batch {batch_seq} of epoch {epoch}: the change log already "
                f"holds a commit from epoch {fence.epoch}, so another node holds the lease. "
                "Stop writing and give up the lease; do not retry.",
                batch_seq=batch_seq,
                epoch=epoch,
                table_batch_seq=fence.batch_seq,
                table_epoch=fence.epoch,
            )
        if fence.batch_seq is not None and fence.batch_seq >= batch_seq:
            raise FencedCommitError(
                f"{dest}: refused batch {batch_seq}: the change log already holds batch "
                f"{fence.batch_seq}. This batch (or a later one) is committed, possibly by an "
                "earlier attempt whose outcome was unknown; call recover() and resume from "
                "its position instead of retrying.",
                batch_seq=batch_seq,
                epoch=epoch,
                table_batch_seq=fence.batch_seq,
                table_epoch=fence.epoch,
            )

    # -- recovery ----------------------------------------------------------------------------

    def recover(self) -> Checkpoint | None:
        """The last committed checkpoint; None when the table or this destination's commits
        do not exist yet.

        batch_seq, epoch and last seq come from the app transactions (kept by checkpoints and
        compaction). The resume position comes from the newest commit's metadata when the log
        still has it, otherwise from the row with the highest seq: falling back to an older
        row's position is safe, because every commit after it produced no rows.

        Raises:
            CheckpointError: the app transactions and the rows disagree, or a position is
                unreadable.
            SinkError: storage or delta-rs trouble (transient).
        """
        with self._lock:
            table = self._current_table(create=False)
            if table is None:
                return None
            fence = self._read_fence(table)
            if fence.batch_seq is None:
                return None
            version = table.version()
            resume = self._resume_from_log(table, fence.batch_seq)
            if resume is None:
                resume = self._resume_from_rows(table, fence)
            return Checkpoint(
                batch_seq=fence.batch_seq,
                epoch=fence.epoch if fence.epoch is not None else 0,
                last_seq=fence.last_seq,
                resume=resume,
                version=version,
            )

    def _resume_from_log(self, table: DeltaTable, batch_seq: int) -> ResumePosition | None:
        try:
            history = table.history(_HISTORY_LOOKBACK)
        except _LIBRARY_ERRORS as exc:  # e.g. a log file cleaned while reading: use the rows
            logger.info(
                "%s: history unreadable (%s); using the rows",
                self._destination,
                self._redact(str(exc)),
            )
            return None
        for info in history:
            if info.get("cdc.destination") != self._destination:
                continue  # maintenance commits, other writers' commits
            if info.get("cdc.batch_seq") != batch_seq:
                return None  # newest own commit's info is gone: fall back to the rows
            return self._parse_resume(info.get("cdc.resume_position"), f"commit {info['version']}")
        return None

    def _resume_from_rows(self, table: DeltaTable, fence: _Fence) -> ResumePosition:
        if fence.last_seq == 0:
            raise CheckpointError(
                f"{self._destination}: the change log holds batch {fence.batch_seq} but no rows, "
                "and its commit metadata was removed by log cleanup, so the resume position is "
                "lost. Restart from a known binlog position (or a new snapshot)."
            )
        # DataFusion prunes files by the seq statistics, so this reads one file, not the table.
        query = QueryBuilder().register("changes", table)
        seq = int(fence.last_seq)
        sql = f"SELECT seq, resume_position FROM changes WHERE seq = {seq}"  # noqa: S608 - int
        reader = self._library("reading the last row", query.execute, sql)
        found = self._library("reading the last row", pa.table, reader)
        positions = [p for p in found.column("resume_position").to_pylist() if p is not None]
        if len(positions) != 1:
            raise CheckpointError(
                f"{self._destination}: expected one row with seq {fence.last_seq} carrying a "
                f"resume position, found {found.num_rows} row(s) and {len(positions)} position(s);"
                " the change log is inconsistent"
            )
        return self._parse_resume(positions[0], f"row seq {fence.last_seq}")

    def _parse_resume(self, text: Any, where: str) -> ResumePosition:
        try:
            return ResumePosition.from_json(str(text))
        except (ValueError, KeyError, TypeError) as exc:
            raise CheckpointError(
                f"{self._destination}: unreadable resume position in {where}: {exc}"
            ) from exc

    # -- maintenance -------------------------------------------------------------------------

    def _maintain(self) -> None:
        """Run the tasks due after this commit; a failure is logged, never raised."""
        policy = self._policy
        table = self._table
        if table is None:
            return
        n = self._commits

        def due(every: int | None) -> bool:
            return every is not None and n % every == 0

        if due(policy.compact_every):
            self._maintenance_task(
                "compaction",
                lambda: table.optimize.compact(target_size=policy.compact_target_size),
            )
        if due(policy.checkpoint_every):
            self._maintenance_task("checkpoint", table.create_checkpoint)
        if due(policy.vacuum_every):
            self._maintenance_task(
                "vacuum",
                lambda: table.vacuum(
                    retention_hours=policy.vacuum_retention_hours,
                    dry_run=False,
                    enforce_retention_duration=policy.vacuum_enforce_retention_duration,
                    full=policy.vacuum_full,
                ),
            )
        if due(policy.cleanup_every):
            self._maintenance_task("log cleanup", table.cleanup_metadata)
        if due(policy.reopen_every) and self._table is not None:
            self._maintenance_task("reopen", self._reopen)

    def _reopen(self) -> None:
        """Replace the open DeltaTable with a freshly loaded one (see reopen_every)."""
        self._table = DeltaTable(self._uri, storage_options=self._storage_options)

    def _maintenance_task(self, name: str, task: Callable[[], object]) -> None:
        started = time.perf_counter()
        try:
            task()
        except Exception as exc:  # maintenance must never fail a commit
            logger.warning(
                "%s: %s of %s failed (the commit is safe; will retry on the next cadence): %s",
                self._destination,
                name,
                self._redact.uri,
                self._redact(f"{type(exc).__name__}: {exc}"),
            )
            self._table = None  # reopen on the next commit rather than trust its state
            return
        logger.debug("%s: %s took %.3f s", self._destination, name, time.perf_counter() - started)

    # -- table access ------------------------------------------------------------------------

    def _current_table(self, *, create: bool) -> DeltaTable | None:
        """The open table, brought up to date; opened (or created) on first use."""
        if self._table is not None:
            self._library("refreshing the table", self._table.update_incremental)
            return self._table
        table = self._open()
        if table is None and create:
            table = self._create()
        if table is not None:
            self._check_layout(table)
        self._table = table
        return table

    def _open(self) -> DeltaTable | None:
        try:
            return DeltaTable(self._uri, storage_options=self._storage_options)
        except TableNotFoundError:
            return None
        except _LIBRARY_ERRORS as exc:
            raise self._sink_error("opening the change log failed", exc) from (
                self._redact.cause(exc)
            )

    def _create(self) -> DeltaTable:
        try:
            return DeltaTable.create(
                self._uri,
                CHANGE_LOG_SCHEMA,
                mode="ignore",
                partition_by=list(PARTITION_COLUMNS),
                name=f"cdc_changes_{self._destination}",
                description=f"cdc-platform change log of destination {self._destination}",
                configuration=self._policy.table_configuration(),
                storage_options=self._storage_options,
            )
        except _LIBRARY_ERRORS as exc:
            table = self._open()  # lost a creation race: the other creator's table is fine
            if table is not None:
                return table
            raise self._sink_error("creating the change log failed", exc) from (
                self._redact.cause(exc)
            )

    def _check_layout(self, table: DeltaTable) -> None:
        """Refuse a table that is not a change log, before writing anything into it."""
        names = set(self._library("reading the schema", table.schema).to_arrow().names)
        missing = [f.name for f in CHANGE_LOG_SCHEMA if f.name not in names]
        partitions = table.metadata().partition_columns
        if missing or list(partitions) != list(PARTITION_COLUMNS):
            raise CheckpointError(
                f"{self._redact.uri} is not a cdc change log: missing columns {missing}, "
                f"partition columns {partitions} (expected {list(PARTITION_COLUMNS)})"
            )

    def _library(self, what: str, call: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        try:
            return call(*args, **kwargs)
        except _LIBRARY_ERRORS as exc:
            self._table = None
            raise self._sink_error(f"{what} failed", exc) from self._redact.cause(exc)

    def _sink_error(self, what: str, exc: BaseException) -> SinkError:
        detail = self._redact(f"{type(exc).__name__}: {exc}")
        return SinkError(f"{self._destination}: {what} on {self._redact.uri}: {detail}")

    def close(self) -> None:
        """Drop the open table; the next call reopens it."""
        with self._lock:
            self._table = None
