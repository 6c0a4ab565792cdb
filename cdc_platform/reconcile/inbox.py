"""Repair requests handed to the process that holds a destination's lease, and their results.

Only the lease holder may write the change log, but the comparison runs elsewhere (it needs
Spark and a full read of the source; the streaming run should not carry that). So the
comparing process writes the suspected keys to ``<lake_root>/<destination>/_reconcile/
requests/<id>.json``; the holder's supervisor notices it, *claims* it (moves it into
``claimed/``), pauses its streaming runtime after the in-flight commit, repairs the keys
under its lease and epoch, writes ``results/<id>.json`` and resumes streaming. A request
nobody claims within the requester's patience is withdrawn (removed), so stale requests do
not pile up; one claimed late is still safe to serve (repairs re-read the source).

Objects in the lake only, no server (:class:`~cdc_platform.sink.lake_files.LakeFile`): the
lake root may be a local directory or an ``s3://`` URI, so requester and holder may run on
different machines. The claim protocol holds on both:

* the holder *copies* the request into ``claimed/`` before it removes it from
  ``requests/`` (on a local disk one rename does both at once, with a single winner);
* the requester withdraws by removing the request and *then* looking into ``claimed/`` and
  ``results/``: a request copied before the removal is seen there and waited for; one removed
  before the copy cannot be copied any more (the copy finds nothing). So a withdrawn request
  is never served and a claimed one is never given up by its requester.
* Only the lease holder claims. A paused former holder that claims too serves the request a
  second time, which is harmless: repairs re-read the source, and its commits are refused by
  the newer epoch. So object stores need no conditional put for the inbox.

The holder touches its claimed file every :data:`HEARTBEAT_SECONDS` while it repairs; the
requester waits for the result as long as those signs of life come, and gives up (an error,
nothing more is expected) when they stop for :data:`STALE_AFTER_SECONDS` (the holder died or
hangs) or when the request vanished. So no wait is unbounded, however long a repair takes.

A request is an authority to write the change log, deletes included, so the holder honours
only requests this platform's reconciliation wrote: each is signed
(:mod:`cdc_platform.backfill.request_signing`). A request that is unreadable, unsigned,
wrongly signed, too old, or names a table outside the destination's filters is refused: logged
with the reason, answered with an error result, never applied. A copy of a request already
served (its result exists) is a replay: logged and removed, its first result kept.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from cdc_platform.backfill.repair import RepairResult, RepairTable
from cdc_platform.backfill.request_signing import (
    MAX_REQUEST_AGE_SECONDS,
    request_key,
    sign_request,
    signing_key,
    verify_request,
)
from cdc_platform.config.models import SourceConfig
from cdc_platform.errors import ReconcileError, SinkError
from cdc_platform.sink.destination_lake import DestinationLake
from cdc_platform.sink.lake_files import LakeFile
from cdc_platform.source.filters import TableFilter

__all__ = ["RepairInbox", "destination_inbox", "inbox_path", "signing_key"]
# signing_key stays importable from here (the reconciliation's tests and callers use it).

log = logging.getLogger(__name__)

_FORMAT = 1
HEARTBEAT_SECONDS = 5.0
"""How often the holder shows it still works on a claimed request."""
STALE_AFTER_SECONDS = 60.0
"""A claimed request without a sign of life for this long is given up by its requester."""


def inbox_path(lake_root: str | os.PathLike[str], destination: str) -> str:
    """``<lake_root>/<destination>/_reconcile`` (a local path or a URI)."""
    return DestinationLake.at(lake_root, destination).repair_inbox


def destination_inbox(
    lake_root: str | os.PathLike[str],
    destination: str,
    source: SourceConfig,
    storage_options: Mapping[str, str] | None = None,
) -> RepairInbox:
    """The inbox of ``destination`` with its key and table filter, for requester and holder
    alike. An unset password variable leaves it without a key (every request refused)."""
    key = request_key(source, destination, "repair")
    captured = TableFilter(source.include_tables, source.exclude_tables)
    root = LakeFile(inbox_path(lake_root, destination), storage_options)
    return RepairInbox(root, key=key, allowed=captured.matches)


class RepairInbox:
    """The request/result folder of one destination; see the module docstring.

    ``root``: a :class:`LakeFile`, or a local path (no storage options needed)."""

    def __init__(  # noqa: PLR0913 (the folder and key; clocks and sleep are injected by tests, keyword-only)
        self,
        root: LakeFile | str | os.PathLike[str],
        *,
        key: bytes | None = None,
        allowed: Callable[[str, str], bool] | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
        max_age: float = MAX_REQUEST_AGE_SECONDS,
    ) -> None:
        self.root = root if isinstance(root, LakeFile) else LakeFile(os.fspath(root))
        self._key = key
        self._allowed = allowed
        self._clock = clock
        self._sleep = sleep
        self._wall_clock = wall_clock
        self._max_age = max_age

    @property
    def requests(self) -> LakeFile:
        return self.root.child("requests")

    @property
    def claimed(self) -> LakeFile:
        return self.root.child("claimed")

    @property
    def results(self) -> LakeFile:
        return self.root.child("results")

    def submit(self, tables: Sequence[RepairTable], *, requester: str = "") -> str:
        """Queue a signed request; returns its id.

        Raises:
            ReconcileError: no key (the source password is empty or unset).
        """
        if self._key is None:
            raise ReconcileError(
                "cannot sign a repair request: the destination's source password (the key's "
                "secret) is empty or not set"
            )
        now = self._wall_clock()
        request_id = f"{int(now * 1000):015d}-{uuid.uuid4().hex[:8]}"
        item: dict[str, Any] = {
            "format": _FORMAT,
            "id": request_id,
            "requester": requester,
            "submitted_at": now,
            "tables": [t.to_json() for t in tables],
        }
        item["signature"] = sign_request(self._key, item)
        self.requests.child(f"{request_id}.json").write_json(item)
        return request_id

    def _check(self, name: str, item: Any) -> tuple[str, list[RepairTable]]:
        """The request's id and tables; ReconcileError saying why it is refused."""
        if not isinstance(item, dict) or item.get("format") != _FORMAT:
            raise ReconcileError("unknown request format")
        why = verify_request(self._key, item, name, now=self._wall_clock(), max_age=self._max_age)
        if why is not None:
            raise ReconcileError(why)
        try:
            tables = [RepairTable.from_json(t) for t in item["tables"]]
        except (KeyError, TypeError, ValueError) as exc:
            raise ReconcileError(f"malformed tables: {exc!r}") from None
        if self._allowed is not None:
            outside = sorted({t.name for t in tables if not self._allowed(t.db, t.table)})
            if outside:
                raise ReconcileError(f"tables outside the destination's filters: {outside}")
        return name, tables

    def pending(self) -> bool:
        """Whether a request waits to be claimed."""
        return bool(self.requests.list(".json"))

    def claim(self) -> tuple[str, list[RepairTable]] | None:
        """Take the oldest waiting valid request (atomic: only one claimer wins), or None.

        Requests that fail the checks (see the module docstring) are answered with an error
        result and logged, never returned.
        """
        for name in self.requests.list(".json"):
            target = self.claimed.child(name)
            if not self.requests.child(name).move_to(target):
                continue  # withdrawn or claimed by someone else
            request_id = name[: -len(".json")]
            if self.results.child(name).exists():
                log.error(
                    "%s: repair request %s refused: served already (a replayed copy); its "
                    "result is kept",
                    self.root,
                    request_id,
                )
                target.delete()
                continue
            try:
                return self._check(request_id, target.read_json())
            except (SinkError, ValueError, KeyError, TypeError, ReconcileError) as exc:
                reason = str(exc) if isinstance(exc, ReconcileError) else repr(exc)
                log.error("%s: repair request %s refused: %s", self.root, request_id, reason)
                self.finish(request_id, error=f"refused: {reason}")
        return None

    def finish(
        self, request_id: str, result: RepairResult | None = None, *, error: str | None = None
    ) -> None:
        """Record the outcome of a claimed request."""
        self.results.child(f"{request_id}.json").write_json(
            {
                "format": _FORMAT,
                "id": request_id,
                "result": result.to_json() if result is not None else None,
                "error": error,
                "finished_at": time.time(),
            },
        )
        self.claimed.child(f"{request_id}.json").delete()

    def withdraw(self, request_id: str) -> bool:
        """Remove a request nobody claimed; False if it was claimed meanwhile (see the
        claim protocol in the module docstring: remove first, then look for the claim)."""
        name = f"{request_id}.json"
        removed = self.requests.child(name).delete()
        return removed and not (
            self.claimed.child(name).exists() or self.results.child(name).exists()
        )

    @contextlib.contextmanager
    def keep_alive(self, request_id: str, *, interval: float = HEARTBEAT_SECONDS) -> Iterator[None]:
        """While the block runs, touch the claimed file every ``interval`` seconds (the
        requester's sign that the holder still works on it)."""
        done = threading.Event()
        claimed = self.claimed.child(f"{request_id}.json")

        def beat() -> None:
            while not done.wait(interval):
                try:
                    claimed.touch()
                except SinkError:
                    return  # finished (or the inbox is gone): nothing left to show

        thread = threading.Thread(target=beat, name=f"cdc-repair-alive-{request_id}", daemon=True)
        thread.start()
        try:
            yield
        finally:
            done.set()
            thread.join(timeout=interval + 1.0)

    def wait(
        self,
        request_id: str,
        timeout: float,
        *,
        poll: float = 0.2,
        stale_after: float = STALE_AFTER_SECONDS,
    ) -> RepairResult | None:
        """The request's result, or None when it was not claimed within ``timeout``.

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
            item = result_file.read_json()
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
