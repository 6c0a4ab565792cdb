"""ZooKeeper client settings and the bounded stop that the lease and the state watch share."""

from __future__ import annotations

import ipaddress
import logging
import ssl
import threading
from dataclasses import dataclass
from typing import Any

from kazoo.exceptions import KazooException
from kazoo.handlers.threading import KazooTimeoutError, SequentialThreadingHandler
from kazoo.security import make_digest_acl
from pydantic import SecretStr

from cdc_platform.errors import ConfigError

__all__ = [
    "CONNECTION_RETRY",
    "BoundedReadHandler",
    "TlsRefusal",
    "client_handler",
    "digest_acl_options",
    "remote_hosts",
    "stop_client",
]

log = logging.getLogger("cdc_platform.infra")

CONNECTION_RETRY: dict[str, float] = {"max_tries": -1, "delay": 0.1, "backoff": 2, "max_delay": 1.0}
"""Reconnect within about a second after a server comes back (0.1 s doubling to 1 s), and never
give up: a standby or a state publisher outlives any ZooKeeper outage."""


@dataclass(frozen=True)
class TlsRefusal:
    """The last TLS handshake a client's handler saw fail: which server and why."""

    host: str
    port: int
    error: ssl.SSLError


class BoundedReadHandler(SequentialThreadingHandler):  # type: ignore[misc]  # kazoo ships no types: its handler class is Any
    """kazoo's threading handler with a bound on how long one read of its socket may wait.

    kazoo waits for the answer to a (re)connect request for the session timeout divided by the
    number of servers: with one server, the whole session. A server that accepts connections
    before it serves (a restarting ZooKeeper binds its port, then loads its data; a proxy whose
    backend is gone) holds such an attempt that long, and the session expires while the client
    waits, although the server was back seconds later. Here a wait on the socket alone (the
    connect answer, the rest of a message) ends after ``bound`` seconds, so the next attempt
    comes while the session lives. kazoo's main loop (the socket and its wake-up pipe, paced by
    its pings) is left as it is.

    It also keeps the last refused TLS handshake (:attr:`tls_refusal`, cleared by a connection
    that succeeds): kazoo takes one for a dropped connection and retries it until its start
    times out, which then says only "Connection time-out".
    """

    def __init__(self, bound: float) -> None:
        super().__init__()
        self.bound = bound
        self.tls_refusal: TlsRefusal | None = None

    def create_connection(self, *args: Any, **kwargs: Any) -> Any:
        try:
            sock = super().create_connection(*args, **kwargs)
        except ssl.SSLError as exc:
            address = kwargs.get("address") or (args[0] if args else ("?", 0))
            host = kwargs.get("hostname") or address[0]
            self.tls_refusal = TlsRefusal(str(host), int(address[1]), exc)
            raise
        self.tls_refusal = None
        return sock

    def select(self, rlist: Any, wlist: Any, xlist: Any, timeout: float | None = None) -> Any:
        if len(rlist) == 1 and not wlist and (timeout is None or timeout > self.bound):
            timeout = self.bound
        return super().select(rlist, wlist, xlist, timeout)


def client_handler(session_timeout: float) -> BoundedReadHandler:
    """The handler of a client with this session timeout: a read waits at most a third of it
    (at least 1 s), leaving the client two more thirds to reach a server that serves."""
    return BoundedReadHandler(max(1.0, session_timeout / 3))


def digest_acl_options(auth: SecretStr | None) -> dict[str, Any]:
    """kazoo client options for digest ``user:password`` credentials: authenticate with them
    and create every node readable and writable by them only; none without credentials."""
    if auth is None:
        return {}
    credentials = auth.get_secret_value()
    user, sep, password = credentials.partition(":")
    if not sep or not user:
        raise ConfigError("ZooKeeper digest auth must be 'user:password'")
    return {
        "auth_data": [("digest", credentials)],
        "default_acl": [make_digest_acl(user, password, all=True)],
    }


def stop_client(client: Any, *, timeout: float = 10.0, what: str = "ZooKeeper client") -> bool:
    """Stop and close a kazoo client, waiting at most ``timeout`` seconds; True when done.

    ``KazooClient.stop`` sends a close request and waits for its writer thread (at least 10 s
    whatever the session timeout); with the server frozen or gone that is as long as a stop
    path may take in all. So it runs in a daemon thread: after ``timeout`` this logs that the
    session could not be closed (the server expires it, removing its ephemeral nodes) and
    returns, and the thread dies with the process.
    """

    def stop() -> None:
        try:
            client.stop()
            client.close()
        except (KazooException, KazooTimeoutError, OSError) as exc:
            log.debug("%s: stopping the ZooKeeper client failed: %s", what, exc)

    thread = threading.Thread(target=stop, name="cdc-zookeeper-stop", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        log.warning(
            "%s: could not close the ZooKeeper session within %g s (server unreachable); "
            "the server expires it and its ephemeral nodes",
            what,
            timeout,
        )
        return False
    return True


def remote_hosts(hosts: str) -> list[str]:
    """The hosts of a kazoo connect string (``h1:2181,h2:2181/chroot``) that are not this
    machine's loopback: reachable by others, so a lease there without ACLs can be faked."""
    remote: list[str] = []
    for part in hosts.split("/", 1)[0].split(","):
        host = part.strip()
        if host.startswith("["):  # [::1]:2181
            host = host[1 : host.find("]")]
        elif host.count(":") == 1:
            host = host.rsplit(":", 1)[0]
        if not host or host == "localhost":
            continue
        try:
            if ipaddress.ip_address(host).is_loopback:
                continue
        except ValueError:
            pass  # a name: not known to be loopback
        remote.append(host)
    return remote
