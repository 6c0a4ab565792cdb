"""Destination configurations for tests and benchmarks against a private MariaDB.

One place that knows how a test destination is configured, as typed objects (for runtimes
built in-process) or as a conf directory (for `cdc-platform` subprocesses and Dagster).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cdc_platform.config.instance import InstanceConfig, StoreConfig
from cdc_platform.config.source import SourceConfig
from cdc_platform.config.start import StartConfig
from cdc_platform.testing.mariadb import MariaDBServer, ReplicationUser

__all__ = ["PASSWORD_ENV", "instance_config", "sqlite_lease", "write_conf"]

PASSWORD_ENV = "CDC_TEST_SOURCE_PASSWORD"
"""The environment variable test destinations read their source password from."""


def instance_config(
    server: MariaDBServer,
    user: str,
    include_tables: Sequence[str],
    *,
    server_id: int,
    password_env: str = PASSWORD_ENV,
    start: StartConfig | None = None,
    **store: Any,
) -> InstanceConfig:
    """A destination on ``server``: quick reconnects and short batch timeouts for tests.
    It starts at the binlog's current end unless ``start`` says otherwise (most tests
    stream what they write themselves; ``start: initial`` is tested on its own)."""
    return InstanceConfig(
        start=start or StartConfig(mode="latest"),
        source=SourceConfig(
            host=server.host,
            port=server.port,
            user=user,
            password_env=password_env,
            server_id=server_id,
            include_tables=list(include_tables),
            reconnect_initial_seconds=0.1,
            reconnect_max_seconds=1.0,
        ),
        store=StoreConfig(**{"batch_timeout_seconds": 0.2, **store}),
    )


def write_conf(
    conf: Path,
    *,
    destination: str,
    server: MariaDBServer,
    user: ReplicationUser,
    database: str,
    lake_root: Path | str,
    server_id: int = 1001,
    extra_store: str = "",
    extra_platform: str = "",
    start: str = "{mode: latest}",
) -> None:
    """A conf directory with one destination capturing every table of ``database``;
    ``extra_platform`` is appended to platform.yaml (lease, reconcile, ... settings);
    ``start`` is the destination's ``start:`` (flow style)."""
    (conf / "destinations" / destination).mkdir(parents=True, exist_ok=True)
    (conf / "platform.yaml").write_text(f"lake_root: {lake_root}\n{extra_platform}")
    (conf / "destinations" / destination / "instance.yaml").write_text(
        f"""\
source:
  host: {server.host}
  port: {server.port}
  user: {user.name}
  password_env: {PASSWORD_ENV}
  server_id: {server_id}
  include_tables: ['{database}\\..*']
  reconnect_initial_seconds: 0.1
  reconnect_max_seconds: 1
start: {start}
store:
  buffer_size: 1024
  batch_size: 64
  batch_timeout_seconds: 0.2
{extra_store}"""
    )


def sqlite_lease(folder: Path | str, *, name: str = "lease.db", **settings: float | bool) -> str:
    """platform.yaml's ``lease:`` line for a test on one machine: the database lease on a
    SQLite file ``name`` in ``folder`` (no server to start), then ``settings`` (for example
    ``expiry_seconds=1.5``) in the order given."""
    values = "".join(f", {key}: {_yaml(value)}" for key, value in settings.items())
    return f"lease: {{backend: database, url: 'sqlite:///{folder}/{name}'{values}}}\n"


def _yaml(value: float | bool) -> str:
    return str(value).lower() if isinstance(value, bool) else f"{value:g}"
