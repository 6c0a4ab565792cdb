"""The protocol of a folder of requests to a destination's lease holder: submit, claim,
signs of life, take-over, answer. :mod:`.request_inbox` holds its two kinds (repairs,
snapshots) and the holder's one inbox over both.

Objects in the lake only, no server (:class:`~cdc_platform.sink.lake_files.LakeFile`): the
lake root may be a local directory or an ``s3://`` URI, so requester and holder may run on
different machines. A folder holds ``requests/``, ``claimed/`` and ``results/``. The claim
protocol holds on both kinds of store:

* the holder *copies* the request into ``claimed/`` before it removes it from ``requests/``
  (on a local disk one rename does both at once, with a single winner);
* a requester that withdraws removes the request and *then* looks into ``claimed/`` and
  ``results/``: a request copied before the removal is seen there and waited for; one removed
  before the copy cannot be copied any more. So a withdrawn request is never served and a
  claimed one is never given up by its requester.
* Only the lease holder claims. A paused former holder that claims too serves the request a
  second time, which is harmless: repairs and snapshots re-read the source, and its commits
  are refused by the newer epoch. So object stores need no conditional put for the inbox.

Signs of life: the holder touches its claimed file every :data:`HEARTBEAT_SECONDS` while it
works. A claim whose file this process has seen unchanged for :data:`STALE_AFTER_SECONDS`
belongs to a holder that died or hangs; what follows is the kind's choice
(:attr:`RequestFolder.resumable`): its requester gives up, or the next holder takes it over.

A request is an authority to write the change log, so the holder honours only requests this
platform wrote: each is signed with its kind's key (:mod:`.request_signing`). A request that
is unreadable, unsigned, wrongly signed, too old, or that its kind refuses (a table outside the
destination's filters) is refused: logged with the reason, answered with an error result,
never served. A copy of a request already answered (its result exists) is a replay: logged and
removed, its first result kept.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping
from typing import Any, ClassVar, Generic, TypeVar

from cdc_platform.backfill.request_signing import (
    MAX_REQUEST_AGE_SECONDS,
    RequestKind,
    sign_request,
    verify_request,
)
from cdc_platform.errors import CdcError, SinkError
from cdc_platform.sink.lake_files import LakeFile

__all__ = ["HEARTBEAT_SECONDS", "STALE_AFTER_SECONDS", "RequestFolder"]

log = logging.getLogger(__name__)

_FORMAT = 1
HEARTBEAT_SECONDS = 5.0
"""How often the holder shows it still works on a claimed request."""
STALE_AFTER_SECONDS = 60.0
"""A claim without a sign of life for this long is given up by a repair's requester, and a
snapshot's is taken over by the holder that sees it."""

R = TypeVar("R")
"""The kind's typed request."""


class RequestFolder(ABC, Generic[R]):
    """One kind's folder of requests, claims and results; see the module docstring.

    The kinds (:class:`~.request_inbox.RepairInbox`, :class:`~.request_inbox.SnapshotInbox`)
    say how their tables are written and checked; the protocol is here. ``root``: a
    :class:`LakeFile`, or a local path.
    """

    kind: ClassVar[RequestKind]
    error: ClassVar[type[CdcError]]
    resumable: ClassVar[bool]
    """Whether a claim whose holder stopped showing signs of life is served again."""

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
        self._claims_seen: dict[str, tuple[float, float]] = {}
        """Claimed file name -> (its modification time, when this inbox first saw it)."""

    @property
    def requests(self) -> LakeFile:
        return self.root.child("requests")

    @property
    def claimed(self) -> LakeFile:
        return self.root.child("claimed")

    @property
    def results(self) -> LakeFile:
        return self.root.child("results")

    # -- the kind's part -------------------------------------------------------------------

    @abstractmethod
    def _request(self, request_id: str, item: dict[str, Any]) -> R:
        """The typed request of a verified ``item``; the kind's error when its tables are not
        acceptable."""

    # -- requester ---------------------------------------------------------------------------

    def _submit(self, tables: list[Any], requester: str) -> str:
        """Queue a signed request for ``tables`` (as JSON); returns its id."""
        if self._key is None:
            raise self.error(
                f"cannot sign a {self.kind} request: the destination's source password (the "
                "key's secret) is empty or not set"
            )
        now = self._wall_clock()
        request_id = f"{int(now * 1000):015d}-{uuid.uuid4().hex[:8]}"
        item: dict[str, Any] = {
            "format": _FORMAT,
            "id": request_id,
            "requester": requester,
            "submitted_at": now,
            "tables": tables,
        }
        item["signature"] = sign_request(self._key, item)
        self.requests.child(f"{request_id}.json").write_json(item)
        return request_id

    def withdraw(self, request_id: str) -> bool:
        """Remove a request nobody claimed; False if it was claimed meanwhile (see the
        claim protocol in the module docstring: remove first, then look for the claim)."""
        name = f"{request_id}.json"
        removed = self.requests.child(name).delete()
        return removed and not (
            self.claimed.child(name).exists() or self.results.child(name).exists()
        )

    # -- holder ------------------------------------------------------------------------------

    def waiting(self) -> list[str]:
        """The ids of the requests waiting to be claimed, oldest first."""
        return [name[: -len(".json")] for name in self.requests.list(".json")]

    def pending(self) -> bool:
        """Whether a request waits to be claimed (or, resumable kinds, a stale claim to be
        taken over)."""
        return bool(self.waiting()) or bool(self._stale_claims())

    def claim(self) -> R | None:
        """Take the oldest waiting valid request (atomic on local disks: one claimer wins),
        else a stale claim of a resumable kind, or None. Requests that fail the checks are
        answered with an error result and logged, never returned."""
        for request_id in self.waiting():
            request = self.claim_waiting(request_id)
            if request is not None:
                return request
        for request_id in self._stale_claims():
            request = self._take_over(request_id)
            if request is not None:
                return request
        return None

    def claim_waiting(self, request_id: str) -> R | None:
        """Claim the waiting request ``request_id``: None when it is gone (withdrawn, claimed
        by someone else), a replay or refused."""
        name = f"{request_id}.json"
        target = self.claimed.child(name)
        if not self.requests.child(name).move_to(target):
            return None
        return self._checked(request_id, target)

    def _checked(self, request_id: str, claimed: LakeFile) -> R | None:
        if self.results.child(claimed.name).exists():
            log.error(
                "%s: %s request %s refused: served already (a replayed copy); its result is kept",
                self.root,
                self.kind,
                request_id,
            )
            claimed.delete()
            return None
        try:
            item = claimed.read_json()
            if not isinstance(item, dict) or item.get("format") != _FORMAT:
                raise self.error("unknown request format")
            why = verify_request(
                self._key, item, request_id, now=self._wall_clock(), max_age=self._max_age
            )
            if why is not None:
                raise self.error(why)
            return self._request(request_id, item)
        except (SinkError, ValueError, KeyError, TypeError, self.error) as exc:
            reason = str(exc) if isinstance(exc, self.error) else repr(exc)
            log.error("%s: %s request %s refused: %s", self.root, self.kind, request_id, reason)
            self._write_result(request_id, {"error": f"refused: {reason}"})
            return None

    def _stale_claims(self) -> list[str]:
        """Claims (resumable kinds only) whose file this inbox has seen unchanged for
        :data:`STALE_AFTER_SECONDS`: their holder died or hangs."""
        if not self.resumable:
            return []
        now = self._clock()
        names = self.claimed.list(".json")
        seen: dict[str, tuple[float, float]] = {}
        stale: list[str] = []
        for name in names:
            mtime = self.claimed.child(name).modified()
            if mtime is None:
                continue
            before = self._claims_seen.get(name)
            seen[name] = before if before is not None and before[0] == mtime else (mtime, now)
            if now - seen[name][1] >= STALE_AFTER_SECONDS:
                stale.append(name[: -len(".json")])
        self._claims_seen = seen
        return stale

    def _take_over(self, request_id: str) -> R | None:
        """Serve a stale claim here: renew it (a sign of life) and check it again."""
        claimed = self.claimed.child(f"{request_id}.json")
        try:
            claimed.touch()
        except SinkError:
            return None  # answered or released meanwhile
        self._claims_seen.pop(claimed.name, None)
        log.warning(
            "%s: %s request %s: its claim showed no sign of life for %g s; serving it here",
            self.root,
            self.kind,
            request_id,
            STALE_AFTER_SECONDS,
        )
        return self._checked(request_id, claimed)

    def release(self, request_id: str) -> None:
        """Put a claimed request back (its work stopped part-way; the next holder goes on)."""
        name = f"{request_id}.json"
        self.claimed.child(name).move_to(self.requests.child(name))

    @contextlib.contextmanager
    def keep_alive(self, request_id: str, *, interval: float = HEARTBEAT_SECONDS) -> Iterator[None]:
        """While the block runs, touch the claimed file every ``interval`` seconds (the
        sign that the holder still works on it)."""
        done = threading.Event()
        claimed = self.claimed.child(f"{request_id}.json")

        def beat() -> None:
            while not done.wait(interval):
                try:
                    claimed.touch()
                except SinkError:
                    return  # finished (or the inbox is gone): nothing left to show

        thread = threading.Thread(target=beat, name=f"cdc-request-alive-{request_id}", daemon=True)
        thread.start()
        try:
            yield
        finally:
            done.set()
            thread.join(timeout=interval + 1.0)

    def _write_result(self, request_id: str, fields: Mapping[str, Any]) -> None:
        """Record the outcome of a claimed request and drop the claim."""
        self.results.child(f"{request_id}.json").write_json(
            {"format": _FORMAT, "id": request_id, **fields, "finished_at": self._wall_clock()}
        )
        self.claimed.child(f"{request_id}.json").delete()

    def _read_result(self, request_id: str) -> dict[str, Any] | None:
        data: Any = self.results.child(f"{request_id}.json").read_json()
        return data if isinstance(data, dict) else None
