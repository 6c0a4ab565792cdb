"""Where a destination resumes, read back from its change log after a restart or a crash.

batch_seq, epoch and last seq come from the app transactions (kept by checkpoints and
compaction). The resume position comes from the newest commit's metadata when the log still
has it, otherwise from the app transaction ``<destination>#position``
(:mod:`cdc_platform.sink.position_slot`) when it names a position after the row with the
highest seq, otherwise from that row. Falling back to the row's older position is correct
(every commit after it produced no rows) but that position may be purged from the server by
then, which the position slot avoids for every plain position.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable, QueryBuilder

from cdc_platform.errors import CheckpointError
from cdc_platform.events import ResumePosition
from cdc_platform.sink.commit import Fence, read_fence
from cdc_platform.sink.position_slot import decode_slot, slot_app_id
from cdc_platform.sink.storage_errors import LIBRARY_ERRORS, StorageGuard

__all__ = ["Checkpoint", "read_checkpoint"]

logger = logging.getLogger("cdc_platform.sink")

HISTORY_LOOKBACK = 50
"""Commits read back to find the newest commit's metadata."""


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """Where a destination resumes: read from the change log by :func:`read_checkpoint`."""

    batch_seq: int
    """Last committed batch; the next batch must be larger."""
    epoch: int
    """Highest lease epoch that committed; a writer needs at least this epoch."""
    last_seq: int
    """seq of the last row; the next row gets ``last_seq + 1`` (0: no rows yet)."""
    resume: ResumePosition
    version: int
    """Table version the checkpoint was read at."""


def read_checkpoint(table: DeltaTable, guard: StorageGuard) -> Checkpoint | None:
    """The last committed checkpoint in ``table``; None before this destination's first commit.

    Raises:
        CheckpointError: the app transactions and the rows disagree, or a position is
            unreadable.
        SinkError: storage or delta-rs trouble (transient).
    """
    destination = guard.destination
    fence = guard.call("reading the fencing state", read_fence, table, destination)
    if fence.batch_seq is None:
        return None
    version = table.version()
    resume = _resume_from_log(table, guard, fence.batch_seq)
    if resume is None:
        row = _resume_from_rows(table, guard, fence)
        slot = guard.call(
            "reading the position slot", table.transaction_version, slot_app_id(destination)
        )
        resume = decode_slot(slot, row) or row
        if resume is not row:
            logger.info(
                "%s: the newest commit's metadata is gone; resuming at its position %s "
                "(the last row's is %s)",
                destination,
                resume,
                row,
            )
    return Checkpoint(
        batch_seq=fence.batch_seq,
        epoch=fence.epoch if fence.epoch is not None else 0,
        last_seq=fence.last_seq,
        resume=resume,
        version=version,
    )


def _resume_from_log(
    table: DeltaTable, guard: StorageGuard, batch_seq: int
) -> ResumePosition | None:
    """The resume position in the commit metadata of ``batch_seq``'s commit, if still there.

    ``table.history`` lists the log as it is in storage now, which for a reader (status, a
    trigger) may already hold a writer's commits newer than the snapshot the fence was read
    from (and numbers them from that snapshot's version down, so its ``version`` fields
    cannot tell them apart: measured on deltalake 1.6). Batches are numbered upwards, so own
    commits of a later batch than the fence's are skipped."""
    destination = guard.destination
    try:
        history = table.history(HISTORY_LOOKBACK)
    except LIBRARY_ERRORS as exc:  # e.g. a log file cleaned while reading: use the rows
        logger.info(
            "%s: history unreadable (%s); using the rows",
            destination,
            guard.redact(str(exc)),
        )
        return None
    for info in history:
        if info.get("cdc.destination") != destination:
            continue  # maintenance commits, other writers' commits
        newer = info.get("cdc.batch_seq")
        if isinstance(newer, int) and newer > batch_seq:
            continue  # committed after the snapshot the fence came from
        if info.get("cdc.batch_seq") != batch_seq:
            return None  # newest own commit's info is gone: fall back to the rows
        where = f"commit {info['version']}"
        return _parse_resume(info.get("cdc.resume_position"), destination, where)
    return None


def _resume_from_rows(table: DeltaTable, guard: StorageGuard, fence: Fence) -> ResumePosition:
    destination = guard.destination
    if fence.last_seq == 0:
        raise CheckpointError(
            f"{destination}: the change log holds batch {fence.batch_seq} but no rows, "
            "and its commit metadata was removed by log cleanup, so the resume position is "
            "lost. Restart from a known binlog position (or a new snapshot)."
        )
    # DataFusion prunes files by the seq statistics, so this reads one file, not the table.
    query = QueryBuilder().register("changes", table)
    seq = int(fence.last_seq)
    sql = f"SELECT seq, resume_position FROM changes WHERE seq = {seq}"  # noqa: S608 - int
    reader = guard.call("reading the last row", query.execute, sql)
    found = guard.call("reading the last row", pa.table, reader)
    positions = [p for p in found.column("resume_position").to_pylist() if p is not None]
    if len(positions) != 1:
        raise CheckpointError(
            f"{destination}: expected one row with seq {fence.last_seq} carrying a "
            f"resume position, found {found.num_rows} row(s) and {len(positions)} position(s);"
            " the change log is inconsistent"
        )
    return _parse_resume(positions[0], destination, f"row seq {fence.last_seq}")


def _parse_resume(text: Any, destination: str, where: str) -> ResumePosition:
    try:
        return ResumePosition.from_json(str(text))
    except (ValueError, KeyError, TypeError) as exc:
        raise CheckpointError(
            f"{destination}: unreadable resume position in {where}: {exc}"
        ) from exc
