"""Shared fixtures: private MariaDB, ZooKeeper, SeaweedFS (S3) and PostgreSQL servers, one per
session (per xdist worker when the suite runs in parallel).

Each test gets its own database (or ZooKeeper chroot), so tests never see each other's data.
When a test fails, the server's log tail is printed in its report.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import re
import signal
import threading
import traceback
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from cdc_platform.testing.mariadb import MariaDBServer, ReplicationUser
from cdc_platform.testing.postgresql import PostgreSQLServer
from cdc_platform.testing.seaweedfs import SeaweedFSServer
from cdc_platform.testing.secrets import REPLICATION_PASSWORD, leaked_secrets
from cdc_platform.testing.zookeeper import ZooKeeperServer

collect_ignore = [] if importlib.util.find_spec("airflow") else ["airflow"]
"""tests/airflow/ runs in .venv-airflow (scripts/test.sh): the main environment has no Airflow."""


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> object:
    """Remember each phase's outcome on the item, so fixtures can tell that a test failed."""
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report


@pytest.fixture(autouse=True)
def _no_secret_in_logs(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """Every test also checks that no log record of the platform holds one of the suite's
    secrets (the replication password, the planted one), whatever went wrong in it."""
    caplog.set_level(logging.INFO, logger="cdc_platform")
    yield
    leaks = [
        (record.name, record.levelname)
        for record in caplog.records
        if leaked_secrets(_rendered(record))
    ]
    assert not leaks, f"a secret reached the log: {leaks}"


_INHERITED_SIGNALS = (signal.SIGINT, signal.SIGQUIT, signal.SIGTERM)
"""Signals whose ignored disposition every child of a worker inherits through fork and exec."""


def _ignored_signals() -> set[signal.Signals]:
    """Which of _INHERITED_SIGNALS the process ignores, from the kernel's mask (native code
    can set SIG_IGN behind Python's back, so ``signal.getsignal`` would not tell)."""
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return set()
    mask = next((line.split()[1] for line in status.splitlines() if line.startswith("SigIgn")), "0")
    bits = int(mask, 16)
    return {s for s in _INHERITED_SIGNALS if bits & (1 << (s - 1))}


@pytest.fixture(autouse=True)
def _signals_restored(request: pytest.FixtureRequest) -> Iterator[None]:
    """A signal left ignored in a worker by a test (or a library it ran) is put back: a later
    child of that worker would inherit it and outlive its SIGTERM (measured: a worker ignoring
    SIGINT, SIGQUIT and SIGTERM after some test, and tests of process groups failing after)."""
    handlers = {s: signal.getsignal(s) for s in _INHERITED_SIGNALS}
    before = _ignored_signals()
    yield
    if threading.current_thread() is not threading.main_thread():
        return  # only the main thread may set handlers (xdist runs tests there)
    for signum in _ignored_signals() - before:
        logging.getLogger("tests").warning(
            "%s left %s ignored; restored", request.node.nodeid, signum.name
        )
        previous = handlers[signum]
        signal.signal(signum, previous if previous is not None else signal.SIG_DFL)


def _rendered(record: logging.LogRecord) -> str:
    text = record.getMessage()
    if record.exc_info and record.exc_info[1] is not None:
        text += "\n" + "".join(traceback.format_exception(record.exc_info[1]))
    return text


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test is marked unit or integration: CI selects by marker, so an unmarked test
    would silently never run. In a parallel run, the longest units of work go first."""
    unmarked = [
        item.nodeid
        for item in items
        if item.get_closest_marker("unit") is None
        and item.get_closest_marker("integration") is None
    ]
    if unmarked:
        raise pytest.UsageError(
            f"tests without a unit or integration marker (add pytestmark): {unmarked[:5]}"
        )
    for item in items:
        if _APACHE_SPARK_PARAM.search(item.nodeid):
            # a JVM engine's first test also starts it; on a loaded 2-core machine the pair
            # has taken over the default 600 s without hanging (the limit is for hangs)
            item.add_marker(pytest.mark.timeout(APACHE_SPARK_TIMEOUT_SECONDS))
    if os.environ.get("PYTEST_XDIST_WORKER"):
        _slowest_files_first(items)


SLOWEST_FILES = (
    "integration/test_dagster_e2e_runs.py",
    "integration/test_dagster_e2e_checks.py",
    "integration/test_s3_maintenance.py",
    "integration/test_dagster_e2e.py",
    "integration/test_dagster_e2e_freshness.py",
    "integration/test_dagster_component.py",
    "integration/test_s3_nodes.py",
    "integration/test_reconcile.py",
    "integration/test_spark_assets.py",
    "integration/test_id_watch.py",
    "integration/test_demo.py",
    "integration/test_ha_failover.py",
    "integration/test_dagster_e2e_reconcile.py",
    "integration/test_dagster_plugin.py",
    "integration/test_snapshot.py",
    "integration/test_binlog_source.py",
    "integration/test_s3_spark.py",
    "unit/test_process_exit.py",
    "integration/test_metrics.py",
    "integration/test_s3_lake.py",
    "integration/test_source_transactions.py",
    "integration/test_source_names.py",
    "integration/test_source_connection.py",
    "integration/test_start_modes.py",
    "integration/test_mirror_keys.py",
    "integration/test_snapshot_faults.py",
    "integration/test_whole_copy.py",
    "integration/test_online_schema_change.py",
)
"""The longest test files, longest first (summed test durations of a parallel run,
``--durations=0``). scripts/test.sh hands whole files to its workers in collection order
(``--dist loadfile --no-loadscope-reorder``): starting the long ones first keeps one of them
from starting last and running alone. Files not named keep their order after these; a stale
list costs only balance, never a test."""


_APACHE_SPARK_PARAM = re.compile(r"\[(classic|connect)[\]-]")
"""A test id parametrised with an Apache Spark engine (``[classic]``, ``[connect-s3]``: the
ids of :data:`cdc_platform.testing.spark_engines.ENGINES` lead the parameter id).

Each such engine is a JVM (a classic driver, a Spark Connect server) started once per worker
process on first use, several seconds of both cores each time: the tests of one engine form
one unit of work, so each JVM starts once per run instead of once per worker, and the two
engines' units run on two workers side by side."""


APACHE_SPARK_TIMEOUT_SECONDS = 1500


def _work_unit(nodeid: str) -> str:
    """The scheduling unit of a test: its Apache Spark engine's unit, or its file."""
    engine = _APACHE_SPARK_PARAM.search(nodeid)
    if engine is not None:
        return f"apache-spark-{engine.group(1)}"
    return nodeid.split("::", 1)[0]


@pytest.hookimpl(optionalhook=True)  # the hook exists only where pytest-xdist is installed
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """Whole files to one worker each (as ``--dist loadfile``), except that the tests on an
    Apache Spark engine form one unit per engine. (pytest-xdist's ``loadgroup`` marks do not
    take on pytest 9, whose test ids are no longer writable.) Called only when pytest-xdist
    is installed: the Airflow environment runs tests/airflow without it."""
    from xdist.scheduler import LoadScopeScheduling  # noqa: PLC0415 (a dev tool only some environments have)

    class FileOrEngineScheduling(LoadScopeScheduling):
        """pytest-xdist's scope scheduling with :func:`_work_unit` as the scope."""

        def _split_scope(self, nodeid: str) -> str:
            return _work_unit(nodeid)

    return FileOrEngineScheduling(config, log)


def _slowest_files_first(items: list[pytest.Item]) -> None:
    """Reorder whole files (a stable sort: each file's tests stay together, in order), the
    tests on an Apache Spark engine before all of them (the longest units of work)."""
    here = Path(__file__).parent
    rank = {name: n for n, name in enumerate(SLOWEST_FILES)}

    def key(item: pytest.Item) -> int:
        if _APACHE_SPARK_PARAM.search(item.nodeid):
            return -1
        try:
            name = item.path.relative_to(here).as_posix()
        except ValueError:
            return len(rank)
        return rank.get(name, len(rank))

    items.sort(key=key)


def _failed(request: pytest.FixtureRequest) -> bool:
    return any(
        getattr(getattr(request.node, f"rep_{when}", None), "failed", False)
        for when in ("setup", "call")
    )


@pytest.fixture(scope="session")
def mariadb_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MariaDBServer]:
    """A private MariaDB with binlog ROW / FULL image / FULL metadata and GTIDs."""
    server = MariaDBServer(tmp_path_factory.mktemp("mariadb"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def replication_user(mariadb_server: MariaDBServer) -> ReplicationUser:
    """A user with only SELECT, REPLICATION SLAVE, REPLICATION CLIENT."""
    return mariadb_server.create_replication_user("cdc", REPLICATION_PASSWORD)


@dataclass(frozen=True)
class MariaDBDatabase:
    """A fresh database on the session's server, for one test."""

    server: MariaDBServer
    name: str
    user: ReplicationUser


def _db_name(node_name: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "_", node_name.lower())[:40].strip("_")
    return f"t_{slug}_{uuid.uuid4().hex[:6]}"


@pytest.fixture
def mariadb(
    request: pytest.FixtureRequest, mariadb_server: MariaDBServer, replication_user: ReplicationUser
) -> Iterator[MariaDBDatabase]:
    """A fresh database per test; the server's error log is printed if the test fails."""
    if not mariadb_server.running:  # a previous test may have killed it on purpose
        mariadb_server.start()
    with mariadb_server.database(_db_name(request.node.name)) as name:
        yield MariaDBDatabase(mariadb_server, name, replication_user)
    if _failed(request):
        print(f"\n--- MariaDB error log ({mariadb_server.error_log_path}) ---")
        print(mariadb_server.error_log())


@pytest.fixture(scope="session")
def zookeeper_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    """A private standalone ZooKeeper with tickTime 500 ms."""
    server = ZooKeeperServer(tmp_path_factory.mktemp("zookeeper"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def zk_hosts(request: pytest.FixtureRequest, zookeeper_server: ZooKeeperServer) -> Iterator[str]:
    """A kazoo connection string with a unique chroot for this test (the chroot exists)."""
    if not zookeeper_server.running:
        zookeeper_server.start()
    chroot = f"/test-{uuid.uuid4().hex[:12]}"
    client = KazooClient(hosts=zookeeper_server.hosts, timeout=5.0)
    client.start(timeout=10)
    try:
        client.ensure_path(chroot)
    finally:
        client.stop()
        client.close()
    yield zookeeper_server.hosts + chroot
    if _failed(request):
        print(f"\n--- ZooKeeper log ({zookeeper_server.log_path}) ---")
        print(zookeeper_server.log_tail())


@pytest.fixture(scope="session")
def postgresql_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PostgreSQLServer]:
    """A private PostgreSQL (trust access for ``postgres``, database ``test``), started only by
    the tests that ask for it."""
    server = PostgreSQLServer(tmp_path_factory.mktemp("postgresql"))
    try:
        server.start()
        yield server
    finally:
        server.remove()


@pytest.fixture
def lake_root(tmp_path: Path) -> Path:
    """A temporary lake root for Delta tables."""
    root = tmp_path / "lake"
    root.mkdir()
    return root


@pytest.fixture(scope="session")
def seaweedfs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeaweedFSServer]:
    """A private SeaweedFS (`weed mini`) serving S3 with a bucket `lake` and one identity."""
    server = SeaweedFSServer(tmp_path_factory.mktemp("seaweedfs"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@dataclass(frozen=True)
class S3Lake:
    """A fresh prefix in the S3 server's bucket for one test; the AWS variables are set."""

    server: SeaweedFSServer
    bucket: str
    prefix: str

    @property
    def uri(self) -> str:
        """``s3://<bucket>/<prefix>``, a lake_root."""
        return f"s3://{self.bucket}/{self.prefix}"

    def keys(self) -> list[str]:
        """Every object under the prefix (``bucket/prefix/...``)."""
        from pyarrow.fs import FileSelector  # noqa: PLC0415 (only S3 tests need it)

        root = f"{self.bucket}/{self.prefix}"
        selector = FileSelector(root, recursive=True, allow_not_found=True)
        return sorted(i.path for i in self.server.filesystem().get_file_info(selector) if i.is_file)


@pytest.fixture
def s3_lake(
    request: pytest.FixtureRequest, seaweedfs: SeaweedFSServer, monkeypatch: pytest.MonkeyPatch
) -> Iterator[S3Lake]:
    """A fresh ``s3://lake/<test>-<id>`` with the standard AWS variables pointing at the
    private server; its log tail is printed if the test fails."""
    if not seaweedfs.running:
        seaweedfs.start()
    for key in ("AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_S3_LOCKING_PROVIDER"):
        monkeypatch.delenv(key, raising=False)
    for key, value in seaweedfs.environment().items():
        monkeypatch.setenv(key, value)
    yield S3Lake(seaweedfs, seaweedfs.bucket, _db_name(request.node.name).replace("_", "-"))
    if _failed(request):
        print(f"\n--- SeaweedFS log ({seaweedfs.log_path}) ---")
        print(seaweedfs.log_tail())
