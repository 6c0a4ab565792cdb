"""One ZooKeeper lease's client: connected on first use, every call bounded, errors translated.

The connection boundary of :class:`~cdc_platform.ha.zookeeper.ZooKeeperLease`: the kazoo client
with the digest ACL and the TLS options of ``lease.*`` (a bad TLS file is a ConfigError when the
lease is built, not a retry loop later), a connect bounded by ``connect_timeout`` whose TLS
refusal is explained, and :meth:`ZooKeeperSession.op`, which waits for one async kazoo call at
most ``max(2 s, session timeout)`` so no lease thread hangs on a server that does not answer.
Reconnects use a bounded back-off (0.1 s doubling to 1 s, forever). What the lease does with its
nodes is not here.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, KazooException, NodeExistsError, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import KazooState

from cdc_platform.config.leases import ZooKeeperLeaseConfig
from cdc_platform.errors import LeaseBackendError
from cdc_platform.infra.zookeeper import (
    CONNECTION_RETRY,
    client_handler,
    digest_acl_options,
    stop_client,
)
from cdc_platform.infra.zookeeper_tls import refusal_message, security_warnings, tls_options

__all__ = ["ZooKeeperSession"]

log = logging.getLogger("cdc_platform.ha")


class ZooKeeperSession:
    """The kazoo client of one lease (``label`` names it in messages: the destination)."""

    def __init__(
        self,
        settings: ZooKeeperLeaseConfig,
        label: str,
        *,
        connect_timeout: float | None = None,
        client_factory: Callable[..., Any] = KazooClient,
    ) -> None:
        self.label = label
        self.hosts = settings.hosts
        self.session_timeout = settings.session_timeout_seconds
        self.connect_timeout = (
            connect_timeout if connect_timeout is not None else self.session_timeout
        )
        self._op_timeout = max(2.0, self.session_timeout)
        self._auth = settings.auth()
        self._tls = settings.tls
        self._tls_options = tls_options(self._tls)  # a bad file: ConfigError now, not retried later
        for warning in security_warnings(self.hosts, self._auth, self._tls):
            log.warning("%s: %s", label, warning)
        self._client_factory = client_factory
        self.client: Any = None
        """The connected client, or None before :meth:`connect` and after :meth:`detach`."""
        self._connect_lock = threading.Lock()

    def connect(
        self, on_state: Callable[[str], None], prepare: Callable[[Any], None]
    ) -> tuple[Any, bool]:
        """The client, connected on first use; True when this call connected it.

        ``on_state`` becomes kazoo's state listener; ``prepare`` runs once on the new client
        before anyone else sees it (the lease creates its paths), and its LeaseBackendError
        stops the client again.
        """
        # Not under the lease's lock: kazoo calls on_state from its own thread during start(),
        # and that listener takes the lease's lock.
        with self._connect_lock:
            if self.client is not None:
                return self.client, False
            handler = client_handler(self.session_timeout)
            client = self._client_factory(
                hosts=self.hosts,
                timeout=self.session_timeout,
                connection_retry=dict(CONNECTION_RETRY),
                command_retry={"max_tries": 2, "delay": 0.1, "backoff": 2, "max_delay": 1.0},
                handler=handler,
                **digest_acl_options(self._auth),
                **self._tls_options,
            )
            client.add_listener(on_state)
            try:
                client.start(timeout=self.connect_timeout)
            except (KazooTimeoutError, KazooException, OSError) as exc:
                stop_client(client, timeout=self.session_timeout)
                cause = refusal_message(handler.tls_refusal, self._tls)
                raise LeaseBackendError(
                    f"{self.label}: cannot connect to ZooKeeper at {self.hosts}: "
                    f"{cause or f'{type(exc).__name__}: {exc}'}"
                ) from exc
            try:
                prepare(client)
            except LeaseBackendError:
                stop_client(client, timeout=self.session_timeout)
                raise
            self.client = client
        return client, True

    def op(self, what: str, start: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run one async kazoo call with a timeout; library errors become LeaseBackendError.

        NoNode/NodeExists/BadVersion pass through: they are answers, not failures.
        """
        try:
            return start(*args, **kwargs).get(timeout=self._op_timeout)
        except (NoNodeError, NodeExistsError, BadVersionError):
            raise
        except (KazooTimeoutError, KazooException, OSError) as exc:
            raise LeaseBackendError(
                f"{self.label}: ZooKeeper {what} failed: {type(exc).__name__}: {exc}"
            ) from exc

    def session_id(self) -> int | None:
        """The ZooKeeper session id (the owner of this session's ephemeral nodes), or None."""
        client = self.client
        if client is None or client.client_id is None:
            return None
        return int(client.client_id[0])

    def connected(self) -> bool:
        """True while the client is connected (not SUSPENDED, not LOST, not closed)."""
        client = self.client
        return client is not None and client.state == KazooState.CONNECTED

    def detach(self) -> Any:
        """Take the client away (closing): later calls see no client; stop it with :meth:`stop`."""
        client, self.client = self.client, None
        return client

    def stop(self, client: Any) -> None:
        """Close a detached client's session, within a bound (see ``stop_client``)."""
        stop_client(client, timeout=self.session_timeout, what=f"{self.label}: lease")
