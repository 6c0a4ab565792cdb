"""The change-log Delta table of one destination, written with delta-rs (no Spark).

One :meth:`DeltaChangeLog.commit` is one Delta commit, and the commit itself is the
checkpoint. This module holds the table (open, create, refresh, layout check) and the commit
loop; what a commit carries and how it is fenced is :mod:`cdc_platform.sink.commit`, reading
the checkpoint back :mod:`cdc_platform.sink.recovery`, the tasks that keep commits fast
:mod:`cdc_platform.sink.maintenance`, and the table layout :mod:`cdc_platform.sink.schema`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from functools import partial
from typing import Any, TypeVar
from uuid import uuid4

from deltalake import DeltaTable, write_deltalake
from deltalake.exceptions import CommitFailedError, TableNotFoundError

from cdc_platform.errors import CheckpointError, SinkError
from cdc_platform.events import ChangeEvent, ResumePosition, ServerIdentity
from cdc_platform.sink.commit import (
    COMMIT_ATTEMPTS,
    CommitFacts,
    CommitResult,
    Fence,
    check_fence,
    chunk_app_id,
    read_fence,
)
from cdc_platform.sink.maintenance import MaintenancePolicy, TableMaintenance
from cdc_platform.sink.recovery import Checkpoint, read_checkpoint
from cdc_platform.sink.schema import (
    CHANGE_LOG_SCHEMA,
    PARTITION_COLUMNS,
    events_to_table,
    row_events,
)
from cdc_platform.sink.spilled_rows import SnapshotRows, commit_data
from cdc_platform.sink.storage_errors import LIBRARY_ERRORS, Redactor, StorageGuard

__all__ = ["DeltaChangeLog"]

logger = logging.getLogger("cdc_platform.sink")

T = TypeVar("T")

_DEFAULT_MAINTENANCE = MaintenancePolicy()
"""Shared default: the policy is frozen."""


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
        maintenance: MaintenancePolicy = _DEFAULT_MAINTENANCE,
    ) -> None:
        if not destination:
            raise ValueError("destination must not be empty")
        self._uri = table_uri
        self._destination = destination
        self._storage_options = dict(storage_options) if storage_options else None
        self._redact = Redactor(table_uri, self._storage_options)
        self._guard = StorageGuard(destination, self._redact)
        self._maintenance = TableMaintenance(
            maintenance, self._guard, self._load, self._storage_options
        )
        self._table: DeltaTable | None = None
        self._lock = threading.Lock()
        self._commits = 0
        self._writer_id = uuid4().hex
        self._server: ServerIdentity | None = None
        """The server of the newest checkpoint this object read or wrote."""

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
        return self._maintenance.policy

    # -- commit ------------------------------------------------------------------------------

    def commit(  # noqa: PLR0913 (the batch; keyword-only commit fields)
        self,
        events: Sequence[ChangeEvent],
        *,
        batch_seq: int,
        resume: ResumePosition,
        epoch: int,
        snapshot: SnapshotRows | None = None,
        chunk: int | None = None,
    ) -> CommitResult:
        """Append one batch as one Delta commit, or refuse it if a newer writer or batch exists.

        ROW and DDL events become rows; COMMIT events none; the ``snapshot`` rows follow them
        (rows spilled to a local file are streamed from it: :mod:`cdc_platform.sink.spilled_rows`).
        A batch without rows still commits (no data files) so the checkpoint moves past
        filtered traffic. ``chunk``: a snapshot chunk's unique mark (see
        :mod:`cdc_platform.sink.commit`).

        Every checkpoint names the server its file/position is in: a ``resume`` without one
        (a side writer's cut) keeps the server of the checkpoint this object last read
        (:meth:`recover`) or wrote, so a switched primary is still detected after it.

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
            if resume.server is None and self._server is not None:
                resume = replace(resume, server=self._server)
            result = self._commit_locked(
                rows,
                batch_seq=batch_seq,
                resume=resume,
                epoch=epoch,
                snapshot=snapshot,
                chunk=chunk,
            )
            self._server = resume.server or self._server
            self._commits += 1
            self._maintain()
        return result

    def _commit_locked(  # noqa: PLR0913 (as commit)
        self,
        rows: Sequence[ChangeEvent],
        *,
        batch_seq: int,
        resume: ResumePosition,
        epoch: int,
        snapshot: SnapshotRows | None,
        chunk: int | None,
    ) -> CommitResult:
        conflict: CommitFailedError | None = None
        count = len(rows) + (len(snapshot) if snapshot is not None else 0)
        for attempt in range(1, COMMIT_ATTEMPTS + 1):
            started = time.perf_counter()
            # Always refresh, even after our own commit (~2 ms when nothing changed): with a
            # short log retention, the commit file after a long-stale snapshot may already be
            # cleaned, and delta-rs would then write that version again without a conflict.
            table = self._current_table(create=True)
            assert table is not None  # create=True never returns None
            fence = self._read_fence(table)
            check_fence(fence, self._destination, batch_seq=batch_seq, epoch=epoch)
            facts = CommitFacts(
                batch_seq=batch_seq,
                epoch=epoch,
                resume=resume,
                first_seq=fence.last_seq + 1,
                last_seq=fence.last_seq + count,
                rows=count,
                chunk=chunk,
            )
            build = partial(
                events_to_table,
                batch_seq=batch_seq,
                epoch=epoch,
                resume=resume,
                committed_at=datetime.now(UTC),
            )  # built anew per attempt: spilled rows are read from their file again
            data = commit_data(rows, facts.first_seq, snapshot, build)
            properties = facts.properties(self._destination, self._writer_id)
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
            except LIBRARY_ERRORS as exc:
                self._table = None  # reopen next time: the object may be half-updated
                raise self._guard.error(f"commit of batch {batch_seq} failed", exc) from (
                    self._redact.cause(exc)
                )
            return CommitResult(
                version=table.version(),
                rows=count,
                first_seq=facts.first_seq,
                last_seq=facts.last_seq,
                seconds=time.perf_counter() - started,
            )
        assert conflict is not None
        raise SinkError(
            f"{self._destination}: batch {batch_seq} lost {COMMIT_ATTEMPTS} commit races in a "
            f"row on {self._redact.uri}; another process keeps committing to this change log"
        ) from self._redact.cause(conflict)

    def _read_fence(self, table: DeltaTable) -> Fence:
        return self._library("reading the fencing state", read_fence, table, self._destination)

    # -- recovery ----------------------------------------------------------------------------

    def recover(self) -> Checkpoint | None:
        """The last committed checkpoint; None when the table or this destination's commits
        do not exist yet (see :mod:`cdc_platform.sink.recovery`).

        Raises:
            CheckpointError: the app transactions and the rows disagree, or a position is
                unreadable.
            SinkError: storage or delta-rs trouble (transient).
        """
        with self._lock:
            table = self._current_table(create=False)
            if table is None:
                return None
            try:
                checkpoint = read_checkpoint(table, self._guard)
            except SinkError:
                self._table = None  # reopen next time: the object may be half-updated
                raise
            if checkpoint is not None and checkpoint.resume.server is not None:
                self._server = checkpoint.resume.server
            return checkpoint

    def chunk_mark(self) -> int | None:
        """The mark of the newest snapshot chunk committed (None: none yet)."""
        with self._lock:
            table = self._current_table(create=False)
            if table is None:
                return None
            return self._library(
                "reading the chunk mark", table.transaction_version, chunk_app_id(self._destination)
            )

    # -- maintenance -------------------------------------------------------------------------

    def _maintain(self) -> None:
        """Run the tasks due after this commit; a failure is logged, never raised."""
        if self._table is not None:
            self._table = self._maintenance.after_commit(self._table, self._commits)

    def _load(self) -> DeltaTable:
        """A freshly loaded DeltaTable (see ``MaintenancePolicy.reopen_every``)."""
        return DeltaTable(self._uri, storage_options=self._storage_options)

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
            return self._load()
        except TableNotFoundError:
            return None
        except LIBRARY_ERRORS as exc:
            raise self._guard.error("opening the change log failed", exc) from (
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
                configuration=self._maintenance.policy.table_configuration(),
                storage_options=self._storage_options,
            )
        except LIBRARY_ERRORS as exc:
            table = self._open()  # lost a creation race: the other creator's table is fine
            if table is not None:
                return table
            raise self._guard.error("creating the change log failed", exc) from (
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
            return self._guard.call(what, call, *args, **kwargs)
        except SinkError:
            self._table = None
            raise

    def close(self) -> None:
        """Commit a compaction merged beside the stream (or delete its files), then drop the
        open table; the next call reopens it."""
        with self._lock:
            self._maintenance.close(self._table)
            self._table = None
