"""Requests to the process that holds a destination's lease, and their answers: one inbox for
repairs and ad-hoc snapshots.

Only the lease holder may write the change log, but the work is asked for elsewhere: a
reconciliation (it needs Spark and a full read of the source) hands over the keys it found
different, an operator (`cdc-platform snapshot --request`, the Dagster ``cdc_snapshot_request``
job, the Airflow operator) asks for a snapshot of chosen tables. The requester writes a signed
``requests/<id>.json`` into its kind's folder of the destination (``_reconcile/`` for repairs,
``_snapshot_requests/`` for snapshots, as
:class:`~cdc_platform.sink.destination_lake.DestinationLake` names them); the holder's inbox
watch notices it, pauses streaming after the in-flight commit, claims it, does the work under
its lease and epoch, writes ``results/<id>.json`` and streams on from the checkpoint. The
holder sees one inbox (:class:`HolderInbox`): the oldest request of either kind first, each a
typed value (:class:`RepairRequest`, :class:`SnapshotRequest`) it dispatches on. Claims,
signs of life and signatures are the same for both kinds (:mod:`.request_folder`).

The kinds differ in what happens when the work does not end with an answer. A repair's
requester waits as long as the holder shows signs of life and gives up (an error: rerun the
reconciliation) when they stop; a request nobody claims within its patience is withdrawn. A
snapshot keeps its progress in the destination's state file, so its request outlives its
holder: a holder that stops mid-way puts it back into ``requests/``, and the claim of one that
died is taken over by the next holder once it has seen no sign of life on it for
:data:`~.request_folder.STALE_AFTER_SECONDS`; it finishes the same snapshot and answers. A
snapshot request is never withdrawn: it waits for a holder however long that takes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from cdc_platform.backfill.repair import RepairResult, RepairTable
from cdc_platform.backfill.request_folder import STALE_AFTER_SECONDS, RequestFolder
from cdc_platform.backfill.request_signing import request_key
from cdc_platform.config.source import SourceConfig
from cdc_platform.errors import ReconcileError, SnapshotError
from cdc_platform.sink.destination_lake import DestinationLake
from cdc_platform.sink.lake_files import LakeFile
from cdc_platform.source.filters import TableFilter
from cdc_platform.source.table_names import any_split_captured, choose_split

__all__ = [
    "HolderInbox",
    "RepairInbox",
    "RepairRequest",
    "Request",
    "SnapshotAnswer",
    "SnapshotInbox",
    "SnapshotRequest",
    "holder_inbox",
    "repair_inbox",
    "snapshot_inbox",
]


@dataclass(frozen=True, slots=True)
class RepairRequest:
    """A claimed repair request: the keys to re-read, per table."""

    request_id: str
    tables: list[RepairTable]
    requester: str = ""
    submitted_at: float = 0.0


@dataclass(frozen=True, slots=True)
class SnapshotRequest:
    """A claimed snapshot request: the ``db.table`` names to copy."""

    request_id: str
    tables: list[str]
    requester: str = ""
    submitted_at: float = 0.0


Request = RepairRequest | SnapshotRequest
"""What the holder's inbox hands out; it dispatches on the type."""


@dataclass(frozen=True, slots=True)
class SnapshotAnswer:
    """The answer to a snapshot request: rows copied per table, or why it failed."""

    rows: dict[str, int]
    error: str | None = None
    finished_at: float = 0.0

    @classmethod
    def from_json(cls, item: Mapping[str, Any]) -> SnapshotAnswer:
        rows = item.get("rows") or {}
        return cls(
            {str(t): int(n) for t, n in rows.items()},
            str(item["error"]) if item.get("error") else None,
            float(item.get("finished_at") or 0.0),
        )


class RepairInbox(RequestFolder[RepairRequest]):
    """Repair requests of one destination (``_reconcile/``)."""

    kind = "repair"
    error = ReconcileError
    resumable = False
    """Its requester gives up at the same staleness and reruns the reconciliation."""

    def submit(self, tables: Sequence[RepairTable], *, requester: str = "") -> str:
        """Queue a signed request; returns its id.

        Raises:
            ReconcileError: no key (the source password is empty or unset).
        """
        return self._submit([t.to_json() for t in tables], requester)

    def _request(self, request_id: str, item: dict[str, Any]) -> RepairRequest:
        try:
            tables = [RepairTable.from_json(t) for t in item["tables"]]
        except (KeyError, TypeError, ValueError) as exc:
            raise ReconcileError(f"malformed tables: {exc!r}") from None
        if self._allowed is not None:
            outside = sorted({t.name for t in tables if not self._allowed(t.db, t.table)})
            if outside:
                raise ReconcileError(f"tables outside the destination's filters: {outside}")
        return RepairRequest(
            request_id, tables, str(item.get("requester", "")), float(item["submitted_at"])
        )

    def finish(
        self, request_id: str, result: RepairResult | None = None, *, error: str | None = None
    ) -> None:
        """Record the outcome of a claimed request."""
        self._write_result(
            request_id, {"result": result.to_json() if result is not None else None, "error": error}
        )

    def wait(
        self,
        request_id: str,
        timeout: float,
        *,
        poll: float = 0.2,
        stale_after: float = STALE_AFTER_SECONDS,
    ) -> RepairResult | None:
        """The request's result, or None when it was not claimed within ``timeout`` (it is
        withdrawn then).

        Once claimed, waits for the result as long as the holder shows signs of life (its
        claimed file changes at least every ``stale_after`` seconds).

        Raises:
            ReconcileError: the holder reported a failure (or refused the request), stopped
                showing signs of life, or the request vanished without a result.
        """
        deadline = self._clock() + timeout
        result_file = self.results.child(f"{request_id}.json")
        claimed_file = self.claimed.child(f"{request_id}.json")
        last_sign: tuple[float, float] | None = None  # (mtime seen, when seen)
        while True:
            item = self._read_result(request_id)
            if item is not None:
                result_file.delete()
                if item.get("error"):
                    raise ReconcileError(f"the lease holder's repair failed: {item['error']}")
                return RepairResult.from_json(item["result"])
            now = self._clock()
            mtime = claimed_file.modified()
            if mtime is not None:
                if last_sign is None or mtime != last_sign[0]:
                    last_sign = (mtime, now)
                elif now - last_sign[1] >= stale_after:
                    raise ReconcileError(
                        f"repair request {request_id}: the lease holder claimed it but showed "
                        f"no sign of life for {stale_after:g} s (it died or hangs); nothing "
                        "more is expected from it: rerun the reconciliation"
                    )
            elif now >= deadline:
                if self.withdraw(request_id):
                    return None
                if not claimed_file.exists() and not result_file.exists():
                    raise ReconcileError(
                        f"repair request {request_id} left the inbox without a result"
                    )
            self._sleep(poll)


class SnapshotInbox(RequestFolder[SnapshotRequest]):
    """Ad-hoc snapshot requests of one destination (``_snapshot_requests/``)."""

    kind = "snapshot"
    error = SnapshotError
    resumable = True
    """Its progress is in the destination's state file: the next holder finishes it."""

    def _checked_tables(self, tables: Sequence[str]) -> list[str]:
        """The request's names, each ``db.table`` and possibly captured. Without the server
        a dotted database's name has several meanings: it is refused only when none is
        captured; the holder's snapshot resolves it and checks the filters on the table the
        server has (:mod:`cdc_platform.source.table_names`)."""
        names: list[str] = []
        for table in tables:
            choose_split(str(table), ())  # SnapshotError unless `db.table`
            if self._allowed is not None and not any_split_captured(str(table), self._allowed):
                raise SnapshotError(f"{table} is not captured by the destination's filters")
            if table not in names:
                names.append(table)
        if not names:
            raise SnapshotError("a snapshot request needs at least one table")
        return names

    def submit(self, tables: Sequence[str], *, requester: str = "") -> str:
        """Queue a request for ``tables`` (``db.table``); returns its id.

        Raises:
            SnapshotError: a table is not `db.table` or not captured by the destination, or
                no key to sign with (the source password is unset or empty).
        """
        return self._submit(self._checked_tables(tables), requester)

    def _request(self, request_id: str, item: dict[str, Any]) -> SnapshotRequest:
        tables = self._checked_tables(list(item.get("tables", [])))
        return SnapshotRequest(
            request_id,
            tables,
            str(item.get("requester", "")),
            float(item.get("submitted_at", 0.0)),
        )

    def finish(
        self, request_id: str, *, rows: dict[str, int] | None = None, error: str | None = None
    ) -> None:
        """Answer a claimed request (rows copied per table, or the error)."""
        self._write_result(request_id, {"rows": rows, "error": error})

    def result(self, request_id: str) -> SnapshotAnswer | None:
        """The answer to a request, or None while it waits or runs."""
        item = self._read_result(request_id)
        return None if item is None else SnapshotAnswer.from_json(item)

    def wait(self, request_id: str, timeout: float, *, poll: float = 0.5) -> SnapshotAnswer | None:
        """The answer once written, or None after ``timeout`` seconds (the request still
        waits for a holder)."""
        deadline = self._clock() + timeout
        while True:
            answer = self.result(request_id)
            if answer is not None or self._clock() >= deadline:
                return answer
            self._sleep(poll)


class HolderInbox:
    """The one inbox the lease holder serves: both kinds, the oldest request first."""

    def __init__(self, repairs: RepairInbox | None, snapshots: SnapshotInbox | None) -> None:
        self.repairs = repairs
        self.snapshots = snapshots

    def _folders(self) -> list[RepairInbox | SnapshotInbox]:
        return [f for f in (self.repairs, self.snapshots) if f is not None]

    def pending(self) -> bool:
        """Whether a request of either kind waits (or a stale snapshot claim)."""
        return any(folder.pending() for folder in self._folders())

    def claim(self) -> Request | None:
        """Claim the oldest waiting valid request of either kind (ids begin with their
        submission time), then a stale claim; None when nothing is left."""
        waiting = sorted(
            (request_id, index)
            for index, folder in enumerate(self._folders())
            for request_id in folder.waiting()
        )
        folders = self._folders()
        for request_id, index in waiting:
            request = folders[index].claim_waiting(request_id)
            if request is not None:
                return request
        for folder in folders:
            taken = folder.claim()  # waiting ones came after the listing, or stale claims
            if taken is not None:
                return taken
        return None


def _filter_of(source: SourceConfig) -> Callable[[str, str], bool]:
    return TableFilter(source.include_tables, source.exclude_tables).matches


FolderT = TypeVar("FolderT", "RepairInbox", "SnapshotInbox")


def _inbox(
    cls: type[FolderT],
    root: LakeFile,
    *,
    kind: Literal["repair", "snapshot"],
    destination: str,
    source: SourceConfig | None,
) -> FolderT:
    """One request folder of ``destination``: signed with ``source``'s key for ``kind`` and
    refusing tables outside its filters, or (no ``source``) one nothing can be submitted to or
    served from."""
    if source is None:
        return cls(root)
    return cls(root, key=request_key(source, destination, kind), allowed=_filter_of(source))


def repair_inbox(lake: DestinationLake, source: SourceConfig | None = None) -> RepairInbox:
    """The repair requests of the destination of ``lake``; with ``source``, requests are signed
    and checked with its key, and tables outside its filters are refused (without ``source``,
    or with its password variable unset, no request can be submitted or served)."""
    root = LakeFile(lake.repair_inbox, lake.storage_options)
    return _inbox(RepairInbox, root, kind="repair", destination=lake.destination, source=source)


def snapshot_inbox(lake: DestinationLake, source: SourceConfig | None = None) -> SnapshotInbox:
    """The snapshot requests of the destination of ``lake``; with ``source``, requests are
    signed and checked with its key, and tables outside its filters are refused (without
    ``source`` no request can be submitted or served)."""
    root = LakeFile(lake.snapshot_inbox, lake.storage_options)
    return _inbox(SnapshotInbox, root, kind="snapshot", destination=lake.destination, source=source)


def holder_inbox(lake: DestinationLake, source: SourceConfig) -> HolderInbox:
    """Both kinds of requests of the destination of ``lake``, as its lease holder serves them."""
    return HolderInbox(repair_inbox(lake, source), snapshot_inbox(lake, source))
