"""One change-log commit: the fencing facts it is checked against and the checkpoint it carries.

A commit is the checkpoint: it carries three app transactions (``txn`` actions), whose latest
versions Delta keeps in every checkpoint forever, so the fencing facts never depend on
``commitInfo`` (which log cleanup drops):

* ``<destination>`` = batch_seq of the commit (the last batch committed),
* ``<destination>#epoch`` = HA lease epoch of the writer (the highest epoch that committed),
* ``<destination>#seq`` = seq of the last row written so far (0 before the first row).

Every commit also carries ``<destination>#position``, its resume position as one integer where
it fits (:mod:`cdc_platform.sink.position_slot`), so a commit without rows keeps its position
through log cleanup. A snapshot chunk's commit also carries ``<destination>#chunk`` = a number
unique to that chunk, so a resumed snapshot can tell its own chunk from any other commit of the
same batch.

The resume position is in the commit's custom metadata (``cdc.resume_position``) and on the
last row of every commit that has rows; after cleanup the position slot (below) or the row
with the highest seq gives it (:mod:`cdc_platform.sink.recovery`).

Fencing is atomic with the commit: the fencing facts are read from the snapshot the commit is
made against, and the commit runs with ``max_commit_retries=0``, so delta-rs cannot silently
rebase it onto a newer version (which it would otherwise do). If someone else committed in
between, delta-rs raises ``CommitFailedError``; the caller refreshes the snapshot, re-checks
the facts and retries (bounded by :data:`COMMIT_ATTEMPTS`).
"""

from __future__ import annotations

from dataclasses import dataclass

from deltalake import DeltaTable
from deltalake.transaction import CommitProperties, Transaction

from cdc_platform.errors import CommitRefusedError
from cdc_platform.events import EVENT_FORMAT_VERSION, ResumePosition
from cdc_platform.sink.position_slot import encode_slot, slot_app_id

__all__ = [
    "CHANGE_LOG_FORMAT_VERSION",
    "COMMIT_ATTEMPTS",
    "CommitFacts",
    "CommitResult",
    "Fence",
    "FencedCommitError",
    "check_fence",
    "chunk_app_id",
    "read_fence",
]

CHANGE_LOG_FORMAT_VERSION = 1
"""Version of the change-log layout (columns, app ids, metadata keys); in every commit."""

COMMIT_ATTEMPTS = 5
"""Commits tried per call when others keep committing in between (each re-checks fencing)."""


@dataclass(frozen=True, slots=True)
class CommitResult:
    """What one commit landed. With no rows, ``first_seq == last_seq + 1`` (an empty range)."""

    version: int
    rows: int
    first_seq: int
    last_seq: int
    seconds: float
    """Wall time from refreshing the snapshot to the commit landing (maintenance excluded)."""


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
class Fence:
    """The fencing facts of one snapshot: the destination's app transaction versions."""

    batch_seq: int | None
    epoch: int | None
    last_seq: int


def read_fence(table: DeltaTable, destination: str) -> Fence:
    """The fencing facts of ``table``'s current snapshot (library errors pass through)."""
    return Fence(
        batch_seq=table.transaction_version(destination),
        epoch=table.transaction_version(f"{destination}#epoch"),
        last_seq=table.transaction_version(f"{destination}#seq") or 0,
    )


def chunk_app_id(destination: str) -> str:
    """The app transaction whose version is the newest snapshot chunk's mark."""
    return f"{destination}#chunk"


def check_fence(fence: Fence, destination: str, *, batch_seq: int, epoch: int) -> None:
    """Refuse a commit of ``batch_seq`` at ``epoch`` that ``fence`` says is stale."""
    if fence.epoch is not None and fence.epoch > epoch:
        raise FencedCommitError(
            f"{destination}: refused batch {batch_seq} of epoch {epoch}: the change log already "
            f"holds a commit from epoch {fence.epoch}, so another node holds the lease. "
            "Stop writing and give up the lease; do not retry.",
            batch_seq=batch_seq,
            epoch=epoch,
            table_batch_seq=fence.batch_seq,
            table_epoch=fence.epoch,
        )
    if fence.batch_seq is not None and fence.batch_seq >= batch_seq:
        raise FencedCommitError(
            f"{destination}: refused batch {batch_seq}: the change log already holds batch "
            f"{fence.batch_seq}. This batch (or a later one) is committed, possibly by an "
            "earlier attempt whose outcome was unknown; call recover() and resume from "
            "its position instead of retrying.",
            batch_seq=batch_seq,
            epoch=epoch,
            table_batch_seq=fence.batch_seq,
            table_epoch=fence.epoch,
        )


@dataclass(frozen=True, slots=True)
class CommitFacts:
    """What one commit records about itself (metadata and app transactions)."""

    batch_seq: int
    epoch: int
    resume: ResumePosition
    first_seq: int
    last_seq: int
    rows: int
    chunk: int | None = None
    """A snapshot chunk's unique mark (app transaction ``<destination>#chunk``)."""

    def properties(self, destination: str, writer_id: str) -> CommitProperties:
        """The commit's custom metadata and app transactions; never rebased by delta-rs."""
        transactions = [
            Transaction(app_id=destination, version=self.batch_seq),
            Transaction(app_id=f"{destination}#epoch", version=self.epoch),
            Transaction(app_id=f"{destination}#seq", version=self.last_seq),
            Transaction(app_id=slot_app_id(destination), version=encode_slot(self.resume)),
        ]
        if self.chunk is not None:
            transactions.append(Transaction(app_id=chunk_app_id(destination), version=self.chunk))
        return CommitProperties(
            custom_metadata={
                "cdc.format_version": CHANGE_LOG_FORMAT_VERSION,
                "cdc.event_format_version": EVENT_FORMAT_VERSION,
                "cdc.destination": destination,
                "cdc.batch_seq": self.batch_seq,
                "cdc.epoch": self.epoch,
                "cdc.resume_position": self.resume.to_json(),
                "cdc.first_seq": self.first_seq,
                "cdc.last_seq": self.last_seq,
                "cdc.rows": self.rows,
                "cdc.writer": writer_id,
            },
            app_transactions=transactions,
            max_commit_retries=0,
        )
