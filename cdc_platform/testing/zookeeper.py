"""A private standalone ZooKeeper for HA tests and the demo.

Debian's `zookeeper` package ships the jar but no service, and its scripts hard-code /etc paths,
so the server is started directly with our own zoo.cfg. tickTime 500 ms makes the
session-timeout floor 1 s, so a killed client's ephemeral node goes within ~2 s; the ceiling is
raised to 60 s (ZooKeeper's default is 20 ticks), so a test can show a takeover that did not
wait for a long session to expire.

With ``tls`` (certificates from :func:`cdc_platform.testing.tls.make_certificates`) the server
also serves its TLS client port (``secureClientPort``, on Netty, PEM key and trust stores) and
requires a client certificate signed by the same CA; the plain port stays for the readiness
probe (4lw).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
from pathlib import Path

from cryptography.hazmat.primitives import serialization

from cdc_platform.testing.processes import (
    PrivateServer,
    ServerStartError,
    child_setup,
    find_binary,
    free_port,
    tail_of,
    wait_until,
)
from cdc_platform.testing.tls import Certificates

__all__ = ["ZooKeeperServer"]

_CLASSPATH = ("/usr/share/java/zookeeper.jar", "/usr/share/java/slf4j-simple.jar")
_NETTY_CLASSPATH = tuple(
    f"/usr/share/java/netty-{name}.jar"
    for name in ("codec", "resolver", "transport-native-unix-common")
)
"""What the TLS port's Netty needs beyond the jars zookeeper.jar's manifest names (Debian's
libnetty-java, a dependency of its zookeeper package)."""


def _tls_settings(tls: Certificates, directory: Path, port: int, host: str) -> list[str]:
    """zoo.cfg lines of the TLS client port; ZooKeeper's PEM key store is one file holding
    the PKCS#8 key and the certificate."""
    key = serialization.load_pem_private_key(tls.server_key.read_bytes(), None)
    keystore = directory / "zk-keystore.pem"
    keystore.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        + tls.server_cert.read_bytes()
    )
    return [
        f"secureClientPort={port}",
        f"secureClientPortAddress={host}",
        "serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory",
        f"ssl.keyStore.location={keystore}",
        "ssl.keyStore.type=PEM",
        f"ssl.trustStore.location={tls.ca_file}",
        "ssl.trustStore.type=PEM",
        "ssl.clientAuth=need",
    ]


def four_letter_word(host: str, port: int, word: str, timeout: float = 1.0) -> str:
    """Send a 4lw command with a timeout: `ruok` during start-up can hang forever."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.settimeout(timeout)
            sock.sendall(word.encode())
            chunks = []
            while True:
                chunk = sock.recv(4096)
                if not chunk:
                    break
                chunks.append(chunk)
            return b"".join(chunks).decode(errors="replace")
    except OSError:
        return ""


class ZooKeeperServer(PrivateServer):
    """One private ZooKeeper server process: start, stop, kill, restart."""

    def __init__(
        self,
        base_dir: Path,
        *,
        port: int | None = None,
        tick_time_ms: int = 500,
        tls: Certificates | None = None,
    ) -> None:
        self.base_dir = base_dir
        self.data_dir = base_dir / "data"
        self.log_path = base_dir / "zookeeper.log"
        self.host = "127.0.0.1"
        super().__init__(port)
        self.tick_time_ms = tick_time_ms
        self.tls = tls
        self.tls_port = free_port() if tls is not None else None

    @property
    def hosts(self) -> str:
        """The kazoo connection string."""
        return f"{self.host}:{self.port}"

    @property
    def tls_hosts(self) -> str:
        """The kazoo connection string of the TLS client port (``tls`` given)."""
        if self.tls_port is None:
            raise ValueError("this ZooKeeperServer was made without tls")
        return f"{self.host}:{self.tls_port}"

    def _move(self) -> None:
        super()._move()
        if self.tls_port is not None:
            self.tls_port = free_port()

    START_TIMEOUT = 30.0

    def _start_once(self, timeout: float) -> None:
        """Write zoo.cfg, start the JVM and wait until `srvr` answers."""
        if self._proc is not None and self._proc.poll() is None:
            return
        classpath = _CLASSPATH + (_NETTY_CLASSPATH if self.tls is not None else ())
        for jar in classpath:
            if not Path(jar).exists():
                raise ServerStartError(
                    f"{jar} is missing; run scripts/setup.sh to install Debian's zookeeper package"
                )
        self.data_dir.mkdir(parents=True, exist_ok=True)
        cfg = self.base_dir / "zoo.cfg"
        tls = (
            _tls_settings(self.tls, self.base_dir, self.tls_port, self.host)
            if self.tls is not None and self.tls_port is not None
            else []
        )
        cfg.write_text(
            "\n".join(
                [
                    *tls,
                    f"tickTime={self.tick_time_ms}",
                    f"dataDir={self.data_dir}",
                    f"clientPort={self.port}",
                    f"clientPortAddress={self.host}",
                    "admin.enableServer=false",
                    "4lw.commands.whitelist=ruok,srvr,stat,mntr,cons",
                    "maxClientCnxns=200",
                    "maxSessionTimeout=60000",
                    "",
                ]
            )
        )
        java = find_binary("java")
        log = self.log_path.open("ab")
        self._proc = subprocess.Popen(
            [
                java,
                "-Xmx256m",
                "-XX:+UseSerialGC",
                "-cp",
                ":".join(classpath),
                "org.apache.zookeeper.server.quorum.QuorumPeerMain",
                str(cfg),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=child_setup(),  # noqa: PLW1509 (only from the main thread)
        )
        log.close()
        proc = self._proc

        def ready() -> bool:
            if proc.poll() is not None:
                raise ServerStartError(
                    f"ZooKeeper exited with {proc.returncode}\n{tail_of(self.log_path)}"
                )
            return "Mode: standalone" in four_letter_word(self.host, self.port, "srvr")

        wait_until(ready, timeout=timeout, what="ZooKeeper", log=self.log_path)

    def pause(self) -> None:
        """kill -STOP: the port stays open but nothing answers (a frozen or partitioned server)."""
        if self._proc is not None and self._proc.poll() is None:
            os.kill(self._proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        """kill -CONT after :meth:`pause`."""
        if self._proc is not None and self._proc.poll() is None:
            os.kill(self._proc.pid, signal.SIGCONT)

    def log_tail(self, lines: int = 60) -> str:
        """The tail of the server log, for failure reports."""
        return tail_of(self.log_path, lines)
