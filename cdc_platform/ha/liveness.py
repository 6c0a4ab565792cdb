"""A direct death signal for the lease holder's process, faster than a session or row expiry.

The holder keeps a small TCP listener open (:class:`LivenessListener`) and publishes its
``host:port`` with the lease. It greets every connection with one line naming its run id and
then never writes. A standby holds one connection to it (:class:`HolderProbe`) and blocks on
reading. When the holder's process dies, kill -9 included, its kernel closes every socket it
had: the standby reads end-of-file (or a reset), and a new connection is refused because the
port has nobody listening any more. Only that pair (a connection that was open and greeted
with the holder's run id, then closed, then a refused reconnect, or a greeting from another
process on that port) counts as proof of death; everything else (cannot connect at all, a
timeout, no greeting) proves nothing and the probe gives up silently, leaving the lease
store's own expiry (ZooKeeper session, lease row) to decide, as without the probe.

A frozen holder (SIGSTOP, a long pause) keeps its sockets: no signal, the expiry decides. A
crashed host or a partition sends nothing: no signal either, the expiry decides. A wrong
signal (the holder lives but its listener went) only makes a standby take over early; the
new epoch fences the old holder, which learns of the loss from the lease store
(``docs/ha.md``).
"""

from __future__ import annotations

import contextlib
import enum
import logging
import selectors
import socket
import threading
import time
from collections.abc import Callable
from typing import Protocol

from cdc_platform.config.leases import LivenessConfig

__all__ = [
    "GREETING",
    "HolderProbe",
    "LivenessListener",
    "ProbeFollower",
    "Reach",
    "default_host",
    "open_listener",
    "reach",
    "split_address",
]

log = logging.getLogger("cdc_platform.ha")

GREETING = b"cdc-liveness 1 "
"""The listener's greeting, version 1: this prefix, the holder's run id, a newline."""

_MAX_GREETING = 128


def default_host() -> str:
    """This machine's host name as it resolves (what other machines reach), else 127.0.0.1."""
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


def open_listener(run_id: str, options: LivenessConfig, what: str) -> LivenessListener | None:
    """The holder's listener, or None when disabled or it cannot listen (logged: standbys then
    learn of this process's death only from the lease store's expiry)."""
    if not options.enabled:
        return None
    try:
        listener = LivenessListener(run_id, options)
    except OSError as exc:
        log.warning("%s: no liveness listener (%s): standbys rely on the lease expiry", what, exc)
        return None
    log.info("%s: liveness listener at %s", what, listener.address)
    return listener


def split_address(address: str) -> tuple[str, int] | None:
    """``host:port`` (or ``[v6]:port``) as a pair, or None when it is not one."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        return None
    return host.strip("[]"), int(port)


class LivenessListener:
    """The holder's side: accepts, greets, holds every connection; closes them all on exit."""

    def __init__(self, run_id: str, options: LivenessConfig, *, max_connections: int = 64):
        self.run_id = run_id
        self.max_connections = max_connections
        host = options.host or default_host()
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            self._sock.bind((host, options.port))
            self._sock.listen(16)
            self._sock.setblocking(False)
        except OSError:
            self._sock.close()
            raise
        bound_host, port = self._sock.getsockname()[:2]
        self.address = f"[{bound_host}]:{port}" if ":" in bound_host else f"{bound_host}:{port}"
        """``host:port`` as published with the lease."""
        self._conns: set[socket.socket] = set()
        self._wake_r, self._wake_w = socket.socketpair()
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="cdc-liveness", daemon=True)
        self._thread.start()

    @property
    def connections(self) -> int:
        """Connections held now (standbys probing this holder)."""
        return len(self._conns)

    def close(self) -> None:
        """Stop listening and close every connection (a standby then sees the holder go)."""
        if self._closed.is_set():
            return
        self._closed.set()
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")
        self._thread.join(timeout=5)

    def _serve(self) -> None:
        selector = selectors.DefaultSelector()
        selector.register(self._sock, selectors.EVENT_READ)
        selector.register(self._wake_r, selectors.EVENT_READ)
        conns = self._conns
        try:
            while not self._closed.is_set():
                for key, _events in selector.select(timeout=1.0):
                    if key.fileobj is self._sock:
                        self._accept(selector, conns)
                    elif key.fileobj is not self._wake_r:
                        conn = key.fileobj
                        assert isinstance(conn, socket.socket)
                        self._drain(selector, conns, conn)
        finally:
            for conn in conns:
                conn.close()
            selector.close()
            self._sock.close()
            self._wake_r.close()
            self._wake_w.close()

    def _accept(self, selector: selectors.BaseSelector, conns: set[socket.socket]) -> None:
        try:
            conn, _peer = self._sock.accept()
        except BlockingIOError:
            return
        except OSError as exc:  # the listener itself broke: stop accepting, keep the rest
            log.warning("liveness listener %s stopped accepting: %s", self.address, exc)
            selector.unregister(self._sock)
            return
        if len(conns) >= self.max_connections:
            conn.close()  # a probe that sees no greeting proves nothing: no harm
            return
        try:
            conn.setblocking(False)
            conn.send(GREETING + self.run_id.encode() + b"\n")
        except OSError:
            conn.close()
            return
        conns.add(conn)
        selector.register(conn, selectors.EVENT_READ)

    @staticmethod
    def _drain(
        selector: selectors.BaseSelector, conns: set[socket.socket], conn: socket.socket
    ) -> None:
        """A standby never writes: readable means it closed (or is misbehaving); drop it."""
        try:
            data = conn.recv(256)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            selector.unregister(conn)
            conns.discard(conn)
            conn.close()


class Connection(Protocol):
    """What the probe needs of a socket (a fake in unit tests)."""

    def recv(self, size: int, /) -> bytes: ...
    def settimeout(self, value: float | None, /) -> None: ...
    def close(self) -> None: ...


Connect = Callable[[tuple[str, int], float], Connection]


class Reach(enum.Enum):
    """What one connection attempt to a holder's listener found."""

    GREETED = "the holder greeted"
    REFUSED = "refused: nobody listens on that port"
    STRANGER = "another process greeted"
    CLOSED = "accepted, then closed before a greeting"
    UNKNOWN = "no answer, or an error that proves nothing"


def reach(
    connect: Connect, address: tuple[str, int], run_id: str, timeout: float
) -> tuple[Reach, Connection | None]:
    """Connect and read the greeting; the connection is returned only when GREETED."""
    try:
        conn = connect(address, timeout)
    except ConnectionRefusedError:
        return Reach.REFUSED, None
    except OSError:
        return Reach.UNKNOWN, None
    line = _greeting(conn, timeout)
    if line == GREETING + run_id.encode() + b"\n":
        return Reach.GREETED, conn
    conn.close()
    if isinstance(line, Reach):
        return line, None
    return Reach.STRANGER, None


def _greeting(conn: Connection, timeout: float) -> bytes | Reach:
    """The greeting line, or CLOSED (end of file or a reset first) or UNKNOWN (a timeout)."""
    line = b""
    try:
        conn.settimeout(timeout)
        while not line.endswith(b"\n") and len(line) < _MAX_GREETING:
            chunk = conn.recv(_MAX_GREETING - len(line))
            if not chunk:
                return Reach.CLOSED
            line += chunk
    except ConnectionResetError:
        return Reach.CLOSED
    except OSError:  # a timeout included
        return Reach.UNKNOWN
    return line


def _connect(address: tuple[str, int], timeout: float) -> Connection:
    return socket.create_connection(address, timeout=timeout)


class HolderProbe:
    """A standby's side: one connection to one holder's listener, in its own thread.

    Calls ``on_dead`` once, from the probe's thread, when the holder's process is proven gone
    (see the module docstring); ends silently when nothing can be proven.
    """

    attempts = 3
    """Reconnects after the close while the port still accepts and closes (a dying process)."""
    pause = 0.05
    """Seconds between those reconnects."""

    def __init__(  # noqa: PLR0913 (what is probed; the rest keyword-only, injectable for tests)
        self,
        address: str,
        run_id: str,
        on_dead: Callable[[], None],
        *,
        timeout: float = 1.0,
        connect: Connect = _connect,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.address = address
        self.run_id = run_id
        self.on_dead = on_dead
        self.timeout = timeout
        self._connect = connect
        self._sleep = sleep
        self._stop = threading.Event()
        self.outcome: str | None = None
        """Why the probe ended: 'dead', or what kept it from proving anything."""

    def start(self) -> None:
        """Probe in a daemon thread."""
        threading.Thread(target=self.run, name="cdc-liveness-probe", daemon=True).start()

    def stop(self) -> None:
        """Stop watching (the holder changed). A decision already made may still be reported,
        so ``on_dead`` checks that the holder it names is still the holder before acting."""
        self._stop.set()

    def run(self) -> None:
        """Connect, wait for the connection to close, decide; the thread's body."""
        target = split_address(self.address)
        if target is None:
            self.outcome = f"not an address: {self.address!r}"
            return
        found, conn = reach(self._connect, target, self.run_id, self.timeout)
        if conn is None:
            self.outcome = f"first contact: {found.value}"
            log.info(
                "no liveness probe of the holder at %s (%s): its session or lease expiry decides",
                self.address,
                found.value,
            )
            return
        log.info("probing the holder's liveness listener at %s", self.address)
        while conn is not None:
            self._wait_closed(conn)
            conn.close()
            if self._stop.is_set():
                self.outcome = "stopped"
                return
            dead, conn = self._check_again(target)
            if dead:
                self.outcome = "dead"
                self.on_dead()
                return
        self.outcome = self.outcome or "gave up"

    def _wait_closed(self, conn: Connection) -> None:
        conn.settimeout(0.5)
        while not self._stop.is_set():
            try:
                if not conn.recv(256):
                    return
            except TimeoutError:
                continue
            except OSError:  # a reset: closed as well
                return

    def _check_again(self, target: tuple[str, int]) -> tuple[bool, Connection | None]:
        """After the connection closed: (True, None) dead; (False, conn) alive; else neither."""
        for _ in range(self.attempts):
            if self._stop.is_set():
                return False, None
            found, conn = reach(self._connect, target, self.run_id, self.timeout)
            if found in (Reach.REFUSED, Reach.STRANGER):
                return not self._stop.is_set(), None
            if found is Reach.GREETED:
                return False, conn
            if found is Reach.UNKNOWN:
                self.outcome = f"after the close: {found.value}"
                return False, None
            self._sleep(self.pause)  # CLOSED: the dying process may still hold its listener
        self.outcome = f"after the close: {Reach.CLOSED.value}, {self.attempts} times"
        return False, None


class ProbeFollower:
    """Keeps one probe on the current other holder; replaces it when the holder changes."""

    def __init__(
        self,
        own_run_id: str,
        on_dead: Callable[[str, int], None],
        *,
        timeout: float = 1.0,
        probe_factory: Callable[..., HolderProbe] = HolderProbe,
    ) -> None:
        self.own_run_id = own_run_id
        self.on_dead = on_dead
        """Called with the dead holder's run id and epoch, from the probe's thread."""
        self.timeout = timeout
        self._probe_factory = probe_factory
        self._lock = threading.Lock()
        self._key: tuple[str, int, str] | None = None
        self._probe: HolderProbe | None = None

    def follow(self, run_id: str | None, epoch: int, liveness: str | None) -> None:
        """The holder now is ``run_id`` at ``epoch`` listening at ``liveness`` (None: nobody,
        or nothing to probe)."""
        key = None
        if run_id is not None and liveness and run_id != self.own_run_id:
            key = (run_id, epoch, liveness)
        with self._lock:
            if key == self._key:
                return
            if self._probe is not None:
                self._probe.stop()
            self._key, self._probe = key, None
            if key is None:
                return
            probe = self._probe_factory(
                key[2], key[0], lambda: self.on_dead(key[0], key[1]), timeout=self.timeout
            )
            self._probe = probe
        probe.start()

    def stop(self) -> None:
        """Stop probing (closing, or acquired)."""
        self.follow(None, -1, None)
