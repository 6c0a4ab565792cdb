"""Ad-hoc snapshots of chosen tables while the destination streams (Debezium's signal-driven
incremental snapshot), requested through the lake.

A requester (`cdc-platform snapshot --request`, the Dagster ``cdc_snapshot_request`` job)
writes ``<lake_root>/<destination>/_snapshot_requests/requests/<id>.json`` naming the tables.
The lease holder's inbox watch sees it, stops the streaming runtime after its in-flight commit,
runs the watermark snapshot of those tables under its own lease and epoch (the binlog keeps
flowing into the change log with every chunk), writes ``results/<id>.json``, removes the
request and streams on from the checkpoint. The run itself never stops.

A request stays in ``requests/`` until it is answered, and the snapshot keeps its progress in
the usual state file: a holder that dies mid-way leaves both, and the next holder finishes the
same snapshot (same tables) and answers.

A request makes the holder read source rows into the change log, and a flood of them stalls
the stream, so it is signed like a repair request
(:mod:`cdc_platform.backfill.request_signing`, its own key kind): the holder refuses a request
that is unsigned, wrongly signed, too old or names a table outside the destination's filters
(answered with the error), and a copy of one already answered (a replay: removed, logged, the
first answer kept).
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cdc_platform.backfill.request_signing import request_key, sign_request, verify_request
from cdc_platform.config.models import SourceConfig
from cdc_platform.errors import SnapshotError
from cdc_platform.sink.destination_lake import DestinationLake
from cdc_platform.sink.lake_files import LakeFile
from cdc_platform.source.filters import TableFilter

__all__ = ["SnapshotInbox", "SnapshotRequest", "snapshot_inbox"]

log = logging.getLogger(__name__)

_FORMAT = 1


@dataclass(frozen=True, slots=True)
class SnapshotRequest:
    """One waiting request."""

    request_id: str
    tables: list[str]
    requester: str
    submitted_at: float


def snapshot_inbox(
    lake_root: str | os.PathLike[str],
    destination: str,
    source: SourceConfig | None = None,
    storage_options: Mapping[str, str] | None = None,
) -> SnapshotInbox:
    """The snapshot-request folder of ``destination``; with ``source``, requests are signed
    and checked with its key, and tables outside its filters are refused (without ``source``
    no request can be submitted or served)."""
    root = LakeFile(DestinationLake.at(lake_root, destination).snapshot_inbox, storage_options)
    if source is None:
        return SnapshotInbox(root)
    return SnapshotInbox(
        root,
        key=request_key(source, destination, "snapshot"),
        allowed=TableFilter(source.include_tables, source.exclude_tables).matches,
    )


class SnapshotInbox:
    """Requests and results of one destination; see the module docstring."""

    def __init__(
        self,
        root: LakeFile,
        *,
        key: bytes | None = None,
        allowed: Callable[[str, str], bool] | None = None,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.root = root
        self._key = key
        self._allowed = allowed
        self._wall_clock = wall_clock

    @property
    def requests(self) -> LakeFile:
        return self.root.child("requests")

    @property
    def results(self) -> LakeFile:
        return self.root.child("results")

    def _checked_tables(self, tables: Sequence[str]) -> list[str]:
        names: list[str] = []
        for table in tables:
            db, dot, name = str(table).partition(".")
            if not dot or not db or not name:
                raise SnapshotError(f"{table!r} is not `db.table`")
            if self._allowed is not None and not self._allowed(db, name):
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
        names = self._checked_tables(tables)
        if self._key is None:
            raise SnapshotError(
                "cannot sign a snapshot request: the destination's source password (the key's "
                "secret) is empty or not set"
            )
        now = self._wall_clock()
        request_id = f"{int(now * 1000):015d}-{uuid.uuid4().hex[:8]}"
        item: dict[str, Any] = {
            "format": _FORMAT,
            "id": request_id,
            "tables": names,
            "requester": requester,
            "submitted_at": now,
        }
        item["signature"] = sign_request(self._key, item)
        self.requests.child(f"{request_id}.json").write_json(item)
        return request_id

    def pending(self) -> bool:
        """Whether a request waits."""
        return bool(self.requests.list(".json"))

    def next(self) -> SnapshotRequest | None:
        """The oldest valid waiting request, or None. An invalid one is answered with its
        error and removed; a replayed copy of an answered one is removed."""
        for name in sorted(self.requests.list(".json")):
            request_id = name[: -len(".json")]
            if self.results.child(name).exists():
                log.error(
                    "%s: snapshot request %s refused: answered already (a replayed copy); its "
                    "answer is kept",
                    self.root,
                    request_id,
                )
                self.requests.child(name).delete()
                continue
            item: Any = self.requests.child(name).read_json()
            if item is None:
                continue  # answered meanwhile
            try:
                if not isinstance(item, dict) or item.get("format") != _FORMAT:
                    raise SnapshotError("unknown request format")
                why = verify_request(self._key, item, request_id, now=self._wall_clock())
                if why is not None:
                    raise SnapshotError(why)
                tables = self._checked_tables(list(item.get("tables", [])))
            except SnapshotError as exc:
                log.error("%s: snapshot request %s refused: %s", self.root, request_id, exc)
                self.finish(request_id, error=f"refused: {exc}")
                continue
            return SnapshotRequest(
                request_id,
                tables,
                str(item.get("requester", "")),
                float(item.get("submitted_at", 0.0)),
            )
        return None

    def finish(
        self, request_id: str, *, rows: dict[str, int] | None = None, error: str | None = None
    ) -> None:
        """Answer a request (rows copied per table, or the error) and remove it."""
        self.results.child(f"{request_id}.json").write_json(
            {
                "format": _FORMAT,
                "id": request_id,
                "rows": rows,
                "error": error,
                "finished_at": self._wall_clock(),
            }
        )
        self.requests.child(f"{request_id}.json").delete()

    def result(self, request_id: str) -> dict[str, Any] | None:
        """The answer to a request, or None while it waits or runs."""
        data: dict[str, Any] | None = self.results.child(f"{request_id}.json").read_json()
        return data

    def wait(
        self,
        request_id: str,
        timeout: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> dict[str, Any] | None:
        """The answer once written, or None after ``timeout`` seconds."""
        deadline = clock() + timeout
        while True:
            answer = self.result(request_id)
            if answer is not None or clock() >= deadline:
                return answer
            sleep(0.5)
