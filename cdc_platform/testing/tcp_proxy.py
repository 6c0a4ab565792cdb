"""A TCP proxy on 127.0.0.1 that can refuse or hold connections, for outage tests.

While it forwards, each accepted connection is piped to the target. :meth:`TcpProxy.refuse`
drops every open connection and closes new ones at once (a server that is down).
:meth:`TcpProxy.black_hole` drops every open connection and accepts new ones without ever
answering them, the way a server that has bound its port but does not serve yet behaves (a
restarting ZooKeeper loading its data). :meth:`TcpProxy.forward` makes new connections go
through again.
"""

from __future__ import annotations

import contextlib
import socket
import threading

__all__ = ["TcpProxy"]


class TcpProxy:
    """Forward ``127.0.0.1:<port>`` to ``target``; a context manager that stops it."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._open: list[socket.socket] = []
        self._mode = "forward"
        self._stopped = False
        self.held = 0
        """Connections accepted by the black hole so far."""
        self._thread = threading.Thread(target=self._accept, name="tcp-proxy", daemon=True)
        self._thread.start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def refuse(self) -> None:
        """Drop every open connection; close new ones at once."""
        with self._lock:
            self._mode = "refuse"
            self._close_open()

    def black_hole(self) -> None:
        """Drop every open connection; accept new ones and never answer them."""
        with self._lock:
            self._mode = "hold"
            self._close_open()

    def forward(self) -> None:
        """Forward new connections again (held ones stay silent until their client gives up)."""
        with self._lock:
            self._mode = "forward"

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            self._close_open()
        self._listener.close()
        self._thread.join(5.0)

    def __enter__(self) -> TcpProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _close_open(self) -> None:
        for sock in self._open:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        self._open.clear()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # stopped
            with self._lock:
                if self._stopped:
                    client.close()
                    return
                if self._mode == "refuse":
                    client.close()
                    continue
                self._open.append(client)
                if self._mode == "hold":
                    self.held += 1
                    continue  # held open, never read: the black hole
                try:
                    upstream = socket.create_connection(self.target, timeout=5.0)
                except OSError:
                    client.close()
                    continue
                upstream.settimeout(None)
                self._open.append(upstream)
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=_pipe, args=(src, dst), daemon=True).start()


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    """Copy ``src`` to ``dst`` until either side closes; then close both."""
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for sock in (src, dst):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
