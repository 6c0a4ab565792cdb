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

The holder touches its claimed file every :data:`HEARTBEAT_SECONDS` while it repairs; the
requester waits for the result as long as those signs of life come, and gives up (an error,
nothing more is expected) when they stop for :data:`STALE_AFTER_SECONDS` (the holder died or
hangs) or when the request vanished. So no wait is unbounded, however long a repair takes.

A request is an authority to write the change log, deletes included, so the holder honours
only requests this platform's reconciliation wrote: each is signed with an HMAC-SHA256 whose
key is derived from the destination's source password (a secret both sides already read from
the environment and never write anywhere; see :func:`signing_key`). A request that is
unreadable, unsigned, wrongly signed, too old, or names a table outside the destination's
filters is refused: logged with the reason, answered with an error result, never applied.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from cdc_platform.backfill.repair import RepairResult, RepairTable
from cdc_platform.config.models import SourceConfig
from cdc_platform.errors import ConfigError, ReconcileError
from cdc_platform.source.filters import TableFilter

__all__ = ["RepairInbox", "destination_inbox", "inbox_path", "signing_key"]

log = logging.getLogger(__name__)

_FORMAT = 1
_KEY_CONTEXT = b"cdc-platform repair request v1\0"
MAX_REQUEST_AGE_SECONDS = 24 * 3600.0
"""A signed request older than this (by its signed submission time) is refused: a copy of an
old request replayed later is not an order from a current reconciliation."""
_MAX_CLOCK_AHEAD_SECONDS = 300.0
HEARTBEAT_SECONDS = 5.0
"""How often the holder shows it still works on a claimed request."""
STALE_AFTER_SECONDS = 60.0
"""A claimed request without a sign of life for this long is given up by its requester."""
"""Tolerated skew between the requester's and the holder's wall clocks."""


def inbox_path(lake_root: Path, destination: str) -> Path:
    """``<lake_root>/<destination>/_reconcile``."""
    return lake_root / destination / "_reconcile"


def signing_key(secret: SecretStr | str, destination: str) -> bytes | None:
    """The request key of ``destination``: HMAC-SHA256 of the destination's name under the
    source password. None when the password is empty (nothing secret to derive from: then no
    request can be signed or honoured)."""
    text = secret.get_secret_value() if isinstance(secret, SecretStr) else secret
    if not text:
        return None
    return hmac.new(text.encode(), _KEY_CONTEXT + destination.encode(), hashlib.sha256).digest()


def destination_inbox(lake_root: Path, destination: str, source: SourceConfig) -> RepairInbox:
    """The inbox of ``destination`` with its key and table filter, for requester and holder
    alike. An unset password variable leaves it without a key (every request refused)."""
    try:
        key = signing_key(source.password(), destination)
    except ConfigError:
        key = None
    captured = TableFilter(source.include_tables, source.exclude_tables)
    return RepairInbox(inbox_path(lake_root, destination), key=key, allowed=captured.matches)


def _signature(key: bytes, item: dict[str, Any]) -> str:
    body = {k: v for k, v in item.items() if k != "signature"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), default=str)
    return hmac.new(key, text.encode(), hashlib.sha256).hexdigest()


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

    def __init__(  # noqa: PLR0913 (the directory and key; clocks and sleep are injected by tests, keyword-only)
        self,
        root: Path,
        *,
        key: bytes | None = None,
        allowed: Callable[[str, str], bool] | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
        max_age: float = MAX_REQUEST_AGE_SECONDS,
    ) -> None:
        self.root = root
        self._key = key
        self._allowed = allowed
        self._clock = clock
        self._sleep = sleep
        self._wall_clock = wall_clock
        self._max_age = max_age

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
        item["signature"] = _signature(self._key, item)
        _write_json(self.requests / f"{request_id}.json", item)
        return request_id

    def _check(self, name: str, item: Any) -> tuple[str, list[RepairTable]]:
        """The request's id and tables; ReconcileError saying why it is refused."""
        if not isinstance(item, dict) or item.get("format") != _FORMAT:
            raise ReconcileError("unknown request format")
        if self._key is None:
            raise ReconcileError("this process has no key to verify requests with")
        signature = item.get("signature")
        if not isinstance(signature, str):
            raise ReconcileError("the request is not signed")
        if not hmac.compare_digest(signature, _signature(self._key, item)):
            raise ReconcileError("wrong signature (not written by this platform's reconcile)")
        if item.get("id") != name:
            raise ReconcileError(f"the request's id {item.get('id')!r} is not its file name")
        age = self._wall_clock() - float(item["submitted_at"])
        if not -_MAX_CLOCK_AHEAD_SECONDS <= age <= self._max_age:
            raise ReconcileError(f"submitted {age:.0f} s ago, outside the accepted age")
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
        try:
            return any(p.suffix == ".json" for p in self.requests.iterdir())
        except FileNotFoundError:
            return False

    def claim(self) -> tuple[str, list[RepairTable]] | None:
        """Take the oldest waiting valid request (atomic: only one claimer wins), or None.

        Requests that fail the checks (see the module docstring) are answered with an error
        result and logged, never returned.
        """
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
            request_id = name[: -len(".json")]
            try:
                item = json.loads(target.read_text(encoding="utf-8"))
                return self._check(request_id, item)
            except (OSError, ValueError, KeyError, TypeError, ReconcileError) as exc:
                reason = str(exc) if isinstance(exc, ReconcileError) else repr(exc)
                log.error("%s: repair request %s refused: %s", self.root, request_id, reason)
                self.finish(request_id, error=f"refused: {reason}")
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

    @contextlib.contextmanager
    def keep_alive(self, request_id: str, *, interval: float = HEARTBEAT_SECONDS) -> Iterator[None]:
        """While the block runs, touch the claimed file every ``interval`` seconds (the
        requester's sign that the holder still works on it)."""
        done = threading.Event()
        path = self.claimed / f"{request_id}.json"

        def beat() -> None:
            while not done.wait(interval):
                try:
                    os.utime(path)
                except OSError:
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
        result_file = self.results / f"{request_id}.json"
        claimed_file = self.claimed / f"{request_id}.json"
        last_sign: tuple[float, float] | None = None  # (mtime seen, when seen)
        while True:
            if result_file.exists():
                item = json.loads(result_file.read_text(encoding="utf-8"))
                result_file.unlink(missing_ok=True)
                if item.get("error"):
                    raise ReconcileError(f"the lease holder's repair failed: {item['error']}")
                return RepairResult.from_json(item["result"])
            now = self._clock()
            try:
                mtime = claimed_file.stat().st_mtime
            except FileNotFoundError:
                mtime = None
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
