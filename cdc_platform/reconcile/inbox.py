"""Repair requests handed to the process that holds a destination's lease, and their results.

Only the lease holder may write the change log, but the comparison runs elsewhere (it needs
Spark and a full read of the source; the streaming run should not carry that). So the
comparing process writes the suspected keys to ``<lake_root>/<destination>/_reconcile/
requests/<id>.json``; the holder's supervisor notices it, *claims* it (an atomic rename into
``claimed/``), pauses its streaming runtime after the in-flight commit, repairs the keys
under its lease and epoch, writes ``results/<id>.json`` and resumes streaming. A request
nobody claims within the requester's patience is withdrawn (removed), so stale requests do
not pile up; one claimed late is still safe to serve (repairs re-read the source).

Files only, no server: the lake root must be a local (or mounted) file system, as for the
snapshot's progress file.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from cdc_platform.errors import ReconcileError
from cdc_platform.reconcile.repair import RepairResult, RepairTable

__all__ = ["RepairInbox", "inbox_path"]

_FORMAT = 1


def inbox_path(lake_root: Path, destination: str) -> Path:
    """``<lake_root>/<destination>/_reconcile``."""
    return lake_root / destination / "_reconcile"


def _write_json(path: Path, item: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    with tmp.open("w", encoding="utf-8") as handle:
        json.dump(item, handle, sort_keys=True, default=str)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


class RepairInbox:
    """The request/result directory of one destination; see the module docstring."""

    def __init__(self, root: Path, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.root = root
        self._clock = clock

    @property
    def requests(self) -> Path:
        return self.root / "requests"

    @property
    def claimed(self) -> Path:
        return self.root / "claimed"

    @property
    def results(self) -> Path:
        return self.root / "results"

    def submit(self, tables: Sequence[RepairTable], *, requester: str = "") -> str:
        """Queue a request; returns its id."""
        request_id = f"{int(time.time() * 1000):015d}-{uuid.uuid4().hex[:8]}"
        _write_json(
            self.requests / f"{request_id}.json",
            {
                "format": _FORMAT,
                "id": request_id,
                "requester": requester,
                "submitted_at": time.time(),
                "tables": [t.to_json() for t in tables],
            },
        )
        return request_id

    def pending(self) -> bool:
        """Whether a request waits to be claimed."""
        try:
            return any(p.suffix == ".json" for p in self.requests.iterdir())
        except FileNotFoundError:
            return False

    def claim(self) -> tuple[str, list[RepairTable]] | None:
        """Take the oldest waiting request (atomic: only one claimer wins), or None."""
        try:
            names = sorted(p.name for p in self.requests.iterdir() if p.suffix == ".json")
        except FileNotFoundError:
            return None
        self.claimed.mkdir(parents=True, exist_ok=True)
        for name in names:
            target = self.claimed / name
            try:
                os.replace(self.requests / name, target)  # atomic on one file system
            except FileNotFoundError:
                continue  # withdrawn or claimed by someone else
            item = json.loads(target.read_text(encoding="utf-8"))
            if item.get("format") != _FORMAT:
                self.finish(item.get("id", name[:-5]), error=f"unknown request format {item!r}")
                continue
            return str(item["id"]), [RepairTable.from_json(t) for t in item["tables"]]
        return None

    def finish(
        self, request_id: str, result: RepairResult | None = None, *, error: str | None = None
    ) -> None:
        """Record the outcome of a claimed request."""
        _write_json(
            self.results / f"{request_id}.json",
            {
                "format": _FORMAT,
                "id": request_id,
                "result": result.to_json() if result is not None else None,
                "error": error,
                "finished_at": time.time(),
            },
        )
        (self.claimed / f"{request_id}.json").unlink(missing_ok=True)

    def withdraw(self, request_id: str) -> bool:
        """Remove a request nobody claimed; False if it was claimed meanwhile."""
        try:
            (self.requests / f"{request_id}.json").unlink()
        except FileNotFoundError:
            return False
        return True

    def wait(self, request_id: str, timeout: float, *, poll: float = 0.2) -> RepairResult | None:
        """The request's result, or None when it was not claimed within ``timeout``.

        Once claimed, waits for the result however long the repair takes (the holder is
        working on it). Raises ReconcileError when the holder reported a failure.
        """
        deadline = self._clock() + timeout
        result_file = self.results / f"{request_id}.json"
        while True:
            if result_file.exists():
                item = json.loads(result_file.read_text(encoding="utf-8"))
                result_file.unlink(missing_ok=True)
                if item.get("error"):
                    raise ReconcileError(f"the lease holder's repair failed: {item['error']}")
                return RepairResult.from_json(item["result"])
            if self._clock() >= deadline and self.withdraw(request_id):
                return None
            time.sleep(poll)
