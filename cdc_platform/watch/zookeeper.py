"""The state watch store in ZooKeeper, for deployments whose lease is ZooKeeper already.

Layout under ``root`` (default ``/cdc``)::

    state/meta                 {"index": N, "floor": F}   (its version serialises writers)
    state/values/<key>         {"value", "index", "fence", "updated_at"}   (key URL-quoted)
    state/events/e-<index>     {"key", "kind", "value", "at"}

A write is one multi-op transaction: set ``meta`` at the version just read (so concurrent
writers retry instead of interleaving), create the event node, create or set the value node.
The event numbers are therefore gap-free and committed in order. The history is trimmed by
raising ``floor`` in the same transaction and deleting event nodes below it afterwards
(readers ignore leftovers below the floor).
"""

from __future__ import annotations

import contextlib
import json
import time
from typing import Any
from urllib.parse import quote, unquote

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, KazooException, NodeExistsError, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError
from pydantic import SecretStr

from cdc_platform.config.zookeeper_tls import ZooKeeperTlsConfig
from cdc_platform.errors import TooFarBehindError, WatchError
from cdc_platform.infra.zookeeper import (
    CONNECTION_RETRY,
    client_handler,
    digest_acl_options,
    stop_client,
)
from cdc_platform.infra.zookeeper_tls import refusal_message, tls_options
from cdc_platform.watch.store import (
    DEFAULT_HISTORY,
    Entry,
    EventKind,
    Listing,
    StateStore,
    WatchEvent,
)

__all__ = ["ZooKeeperStateStore"]

_WRITE_ATTEMPTS = 20
_ZK_ERRORS = (KazooException, KazooTimeoutError, OSError)


class ZooKeeperStateStore(StateStore):
    """A :class:`StateStore` in ZooKeeper; many processes may read and write it."""

    def __init__(  # noqa: PLR0913 (the hosts; the rest keyword-only settings with defaults)
        self,
        hosts: str,
        *,
        root: str = "/cdc",
        history: int = DEFAULT_HISTORY,
        session_timeout: float = 10.0,
        auth: SecretStr | None = None,
        tls: ZooKeeperTlsConfig | None = None,
    ) -> None:
        if history < 1:
            raise ValueError("history must be >= 1")
        self.hosts = hosts
        base = f"{root.rstrip('/')}/state"
        self._meta = f"{base}/meta"
        self._values = f"{base}/values"
        self._events = f"{base}/events"
        self.history = history
        self._session_timeout = session_timeout
        self._auth = auth
        self._tls = tls
        self._tls_options = tls_options(tls)
        self._client: Any = None

    def _connect(self) -> Any:
        if self._client is not None:
            return self._client
        handler = client_handler(self._session_timeout)
        client = KazooClient(
            hosts=self.hosts,
            timeout=self._session_timeout,
            connection_retry=dict(CONNECTION_RETRY),
            handler=handler,
            **digest_acl_options(self._auth),
            **self._tls_options,
        )
        try:
            client.start(timeout=self._session_timeout)
            client.ensure_path(self._values)
            client.ensure_path(self._events)
            with contextlib.suppress(NodeExistsError):
                client.create(self._meta, json.dumps({"index": 0, "floor": 0}).encode())
        except _ZK_ERRORS as exc:
            stop_client(client, timeout=self._session_timeout, what="state watch")
            cause = refusal_message(handler.tls_refusal, self._tls) or repr(exc)
            raise WatchError(f"state watch: cannot use ZooKeeper at {self.hosts}: {cause}") from exc
        self._client = client
        return client

    def _call(self, what: str, start: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return start(*args, **kwargs).get(timeout=max(2.0, self._session_timeout))
        except (NoNodeError, NodeExistsError, BadVersionError):
            raise
        except _ZK_ERRORS as exc:
            raise WatchError(f"state watch: ZooKeeper {what} failed: {exc!r}") from exc

    def _read_meta(self) -> tuple[int, int, int]:
        client = self._connect()
        raw, stat = self._call("read", client.get_async, self._meta)
        meta = json.loads(raw or b"{}")
        return int(meta.get("index", 0)), int(meta.get("floor", 0)), int(stat.version)

    def _value_path(self, key: str) -> str:
        return f"{self._values}/{quote(key, safe='')}"

    def _event_path(self, index: int) -> str:
        return f"{self._events}/e-{index:020d}"

    def _write(self, key: str, kind: EventKind, value: str | None, fence: int | None) -> int | None:
        client = self._connect()
        for _ in range(_WRITE_ATTEMPTS):
            index, floor, version = self._read_meta()
            try:
                raw, stat = self._call("read", client.get_async, self._value_path(key))
                current: dict[str, Any] | None = json.loads(raw)
            except NoNodeError:
                current, stat = None, None
            if kind is EventKind.DELETE and current is None:
                return None
            stored = None if current is None else current.get("fence")
            if fence is not None and stored is not None and fence < int(stored):
                return None
            new = index + 1
            new_floor = max(floor, new - self.history)
            now = time.time()
            tx = client.transaction()
            tx.set_data(
                self._meta, json.dumps({"index": new, "floor": new_floor}).encode(), version=version
            )
            event = {"key": key, "kind": kind.value, "value": value, "at": now}
            tx.create(self._event_path(new), json.dumps(event).encode())
            path = self._value_path(key)
            if kind is EventKind.DELETE:
                assert stat is not None
                tx.delete(path, version=stat.version)
            else:
                kept = fence if fence is not None else stored
                data = {"value": value, "index": new, "fence": kept, "updated_at": now}
                if stat is None:
                    tx.create(path, json.dumps(data).encode())
                else:
                    tx.set_data(path, json.dumps(data).encode(), version=stat.version)
            results = self._call("transaction", tx.commit_async)
            if not any(isinstance(r, Exception) for r in results):
                self._trim(client, floor, new_floor)
                return new
            time.sleep(0.005)  # another writer won the meta version: read again
        raise WatchError(f"state watch: {_WRITE_ATTEMPTS} write conflicts in a row on {key!r}")

    def _trim(self, client: Any, old_floor: int, new_floor: int) -> None:
        for index in range(old_floor + 1, new_floor + 1):
            with contextlib.suppress(NoNodeError, *_ZK_ERRORS):
                client.delete(self._event_path(index))

    def put(self, key: str, value: str, *, fence: int | None = None) -> int | None:
        """Set ``key`` unless the fence refuses it."""
        return self._write(key, EventKind.PUT, value, fence)

    def delete(self, key: str, *, fence: int | None = None) -> int | None:
        """Remove ``key`` unless absent or refused."""
        return self._write(key, EventKind.DELETE, None, fence)

    def get(self, key: str) -> Entry | None:
        """The current entry."""
        client = self._connect()
        try:
            raw, _stat = self._call("read", client.get_async, self._value_path(key))
        except NoNodeError:
            return None
        return _entry(key, json.loads(raw))

    def listing(self, prefix: str = "") -> Listing:
        """Entries under ``prefix``; the index is read first, so nothing after it is missed."""
        client = self._connect()
        index, _floor, _version = self._read_meta()
        names = self._call("list", client.get_children_async, self._values)
        entries = []
        for name in sorted(names):
            key = unquote(name)
            if not key.startswith(prefix):
                continue
            try:
                raw, _stat = self._call("read", client.get_async, f"{self._values}/{name}")
            except NoNodeError:
                continue
            entries.append(_entry(key, json.loads(raw)))
        return Listing(entries, index)

    def events(self, prefix: str, since: int, limit: int = 1000) -> list[WatchEvent]:
        """Kept events after ``since``; TooFarBehindError when some were dropped."""
        client = self._connect()
        index, floor, _version = self._read_meta()
        if since < floor or since > index:
            raise TooFarBehindError(since, floor + 1 if index > floor else 0, index)
        numbers = range(since + 1, index + 1)  # at most `history` of them, since since >= floor
        pending = [(n, client.get_async(self._event_path(n))) for n in numbers]  # one round trip
        found: list[WatchEvent] = []
        for number, result in pending:
            try:
                raw, _stat = self._call("read", lambda r=result: r)
            except NoNodeError:
                raise TooFarBehindError(since, number + 1, index) from None
            data = json.loads(raw)
            if not str(data["key"]).startswith(prefix):
                continue
            found.append(
                WatchEvent(number, data["key"], EventKind(data["kind"]), data["value"], data["at"])
            )
            if len(found) >= limit:
                break
        return found

    def index(self) -> int:
        """The newest index."""
        return self._read_meta()[0]

    def close(self) -> None:
        """Stop the client."""
        client, self._client = self._client, None
        if client is not None:
            stop_client(client, timeout=self._session_timeout, what="state watch")


def _entry(key: str, data: dict[str, Any]) -> Entry:
    fence = data.get("fence")
    return Entry(
        key,
        str(data["value"]),
        int(data["index"]),
        None if fence is None else int(fence),
        data.get("updated_at"),
    )
