"""Full-list reconciliation: divergences behind the binlog's back are found and repaired.

Real MariaDB (binlog), real Delta change log, real mirrors built by Spark (Sail), real
leases (SQLite): the divergences are injected the ways they happen in production (a mirror
row deleted by hand, rows changed or deleted with ``SET sql_log_bin = 0``).
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from cdc_platform.backfill.repair import RepairKey, RepairTable
from cdc_platform.backfill.request_inbox import RepairInbox, repair_inbox
from cdc_platform.backfill.snapshot import SnapshotRunner
from cdc_platform.config import ConfigSet, load_config
from cdc_platform.coordination.factory import open_lease
from cdc_platform.errors import ReconcileError, SourceSettingsError
from cdc_platform.reconcile.service import ReconcileReport, reconcile_destination
from cdc_platform.runtime import DestinationRuntime
from cdc_platform.runtime.supervised import supervised_destination
from cdc_platform.runtime.supervisor import LeaseSupervisor
from cdc_platform.sink.destination_lake import DestinationLake
from cdc_platform.sink.term import WriteTerm
from cdc_platform.spark.locations import mirror_root, mirror_uri
from cdc_platform.spark.mirror import apply_changes
from cdc_platform.spark.target import MirrorTarget
from cdc_platform.testing.destinations import PASSWORD_ENV, sqlite_lease, write_conf
from cdc_platform.testing.mariadb import ReplicationUser
from cdc_platform.testing.processes import wait_for
from cdc_platform.testing.replay import replay
from cdc_platform.testing.workload import source_rows
from tests.conftest import MariaDBDatabase

pytestmark = pytest.mark.integration

TYPED_TABLE = """CREATE TABLE typed (
    id INT PRIMARY KEY, i8 TINYINT, u64 BIGINT UNSIGNED, d DECIMAL(12,4), f FLOAT,
    g DOUBLE, b BIT(10), dt DATE, dtm DATETIME(3), ts TIMESTAMP(6) NULL, tm TIME(2),
    y YEAR, c CHAR(5), vc VARCHAR(20), tx TEXT, bn BINARY(4), vb VARBINARY(8), bl BLOB,
    e ENUM('a','b','c'), s SET('x','y','z'), j JSON, u UUID, i4 INET4, i6 INET6,
    l1 VARCHAR(10) CHARACTER SET latin1
) CHARACTER SET utf8mb4"""

TYPED_ROWS = """INSERT INTO typed VALUES
(1, -128, 18446744073709551615, -12.5000, 1.1, 3.141592653589793, b'0000000101',
 '2024-02-29', '2024-02-29 13:14:15.123', '2024-06-01 08:30:00.250000', '-01:00:00.25',
 2024, 'ab  ', 'héllo 😀', REPEAT('t', 300), X'00FF0000', X'DEADBEEF', X'',
 'c', 'x,z', '{"a": [1, 2.5, null, true]}', '123e4567-e89b-12d3-a456-426614174000',
 '10.0.0.1', '::ffff:1.2.3.4', 'é'),
(2, NULL, 0, 0, -0.000123, 1e300, b'0', '0000-00-00', '9999-12-31 23:59:59.999',
 NULL, '838:59:59', 1901, '', '', '', X'00000000', NULL, NULL, NULL, '', '"str"',
 NULL, NULL, '2001:db8::ff00:42:8329', NULL),
(3, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
 NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)"""


@pytest.fixture
def destination(
    mariadb: MariaDBDatabase, lake_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> ConfigSet:
    """Conf dir with destination `d` over the test database; items + pairs + typed filled."""
    monkeypatch.setenv(PASSWORD_ENV, mariadb.user.password)
    conf = tmp_path / "conf"
    write_conf(
        conf,
        destination="d",
        server=mariadb.server,
        user=mariadb.user,
        database=mariadb.name,
        lake_root=lake_root,
        server_id=3101,
        extra_platform=sqlite_lease(tmp_path, renew_interval_seconds=0.2, expiry_seconds=1.5)
        + "reconcile: {chunk_size: 400}\n",
    )
    config = load_config(conf)
    assert not config.errors, config.errors
    mariadb.server.execute(
        "CREATE TABLE items (id INT PRIMARY KEY, name VARCHAR(40), price DECIMAL(10,2), qty INT)",
        "CREATE TABLE pairs (a INT, b VARCHAR(10), v INT, PRIMARY KEY (a, b))",
        TYPED_TABLE,
        database=mariadb.name,
    )
    DestinationRuntime(
        WriteTerm("d", config.destinations["d"].config, DestinationLake.of(config, "d"))
    ).run(exit_when_idle_seconds=0.5)
    values = ", ".join(f"({i}, 'item {i}', {i}.25, {i % 7})" for i in range(1, 2001))
    pairs = ", ".join(f"({i // 3}, 'k{i % 3}', {i})" for i in range(600))
    mariadb.server.execute(
        f"INSERT INTO items VALUES {values}",
        f"INSERT INTO pairs VALUES {pairs}",
        TYPED_ROWS,
        database=mariadb.name,
    )
    catch_up(config)
    return config


def catch_up(config: ConfigSet) -> None:
    summary = DestinationRuntime(
        WriteTerm("d", config.destinations["d"].config, DestinationLake.of(config, "d"))
    ).run(exit_when_idle_seconds=1.5)
    assert summary.error is None, summary


def apply_mirrors(spark: SparkSession, config: ConfigSet, db: str) -> None:
    root = mirror_root(config.lake_root, "d")
    for table in ("items", "pairs", "typed"):
        apply_changes(
            spark, MirrorTarget(DestinationLake.of(config, "d").change_log, root, db, table)
        )


def by_table(report: ReconcileReport) -> dict[str, tuple[int, int, int]]:
    """table -> (missing in mirror, changed, only in mirror)."""
    return {
        t.table: (t.missing_in_mirror, t.changed, t.extra_in_mirror)
        for t in report.tables
        if t.differences
    }


def inject(spark: SparkSession, config: ConfigSet, db: MariaDBDatabase) -> None:
    """One divergence of each kind."""
    root = mirror_root(config.lake_root, "d")
    spark.sql(f"DELETE FROM delta.`{mirror_uri(root, db.name, 'items')}` WHERE id = 7")
    db.server.execute(
        "SET sql_log_bin = 0",
        "UPDATE items SET name = 'changed quietly', price = 1.00 WHERE id = 11",
        "DELETE FROM items WHERE id = 13",
        "INSERT INTO pairs VALUES (500, 'new', 1)",
        "UPDATE typed SET s = 'y', dtm = '2020-01-01 00:00:00.5' WHERE id = 1",
        database=db.name,
    )


def assert_change_log_replays_to_source(config: ConfigSet, db: MariaDBDatabase) -> None:
    result = replay(DestinationLake.of(config, "d").change_log)
    assert result.duplicates == []
    assert result.tables[f"{db.name}.items"] == source_rows(db.server, db.name, "items")


def test_divergences_found_repaired_and_second_run_clean(
    spark: SparkSession, destination: ConfigSet, mariadb: MariaDBDatabase
) -> None:
    """Nobody streams: the reconciliation takes the free lease, repairs, releases."""
    apply_mirrors(spark, destination, mariadb.name)
    clean = reconcile_destination(destination, "d", spark)
    # every column type compares equal to itself through the mirror's typing (no noise)
    assert clean.status == "clean", clean.metadata()
    assert clean.differences == 0
    assert {t.table: t.source_rows for t in clean.tables} == {
        "items": 2000,
        "pairs": 600,
        "typed": 3,
    }
    assert next(t for t in clean.tables if t.table == "items").chunks == 5

    inject(spark, destination, mariadb)
    report = reconcile_destination(destination, "d", spark)
    assert report.status == "repaired", report.metadata()
    assert by_table(report) == {"items": (1, 1, 1), "pairs": (1, 0, 0), "typed": (0, 1, 0)}
    items = next(t for t in report.tables if t.table == "items")
    assert items.differing_chunks == 2  # chunk of ids 1-400 (7, 11, 13) + nothing else
    assert report.repair is not None
    assert sum(report.repair.upserts.values()) == 4  # 7 and 11, the new pair, typed 1
    assert report.repair.deletes == {
        f"{mariadb.name}.items": 1,
        f"{mariadb.name}.pairs": 0,
        f"{mariadb.name}.typed": 0,
    }
    assert "this process" in (report.repaired_by or "")

    version = DeltaTable(DestinationLake.of(destination, "d").change_log).version()
    apply_mirrors(spark, destination, mariadb.name)
    again = reconcile_destination(destination, "d", spark)
    assert again.status == "clean", again.metadata()
    assert again.differences == 0
    assert (
        DeltaTable(DestinationLake.of(destination, "d").change_log).version() == version
    )  # nothing written
    assert_change_log_replays_to_source(destination, mariadb)


@pytest.fixture
def streaming(destination: ConfigSet) -> Iterator[LeaseSupervisor]:
    """The destination's normal run (lease holder) in a thread."""
    with supervised_destination(destination, destination.destinations["d"]) as supervisor:
        thread = threading.Thread(target=supervisor.run, daemon=True)
        thread.start()
        try:
            yield supervisor
        finally:
            supervisor.request_stop("test over")
            thread.join(timeout=30)
            assert not thread.is_alive()


def test_repair_is_written_by_the_lease_holder_while_it_streams(
    spark: SparkSession,
    destination: ConfigSet,
    mariadb: MariaDBDatabase,
    streaming: LeaseSupervisor,
) -> None:
    apply_mirrors(spark, destination, mariadb.name)
    inject(spark, destination, mariadb)
    stop = threading.Event()

    def keep_writing() -> None:  # ordinary changes keep flowing during the reconciliation
        i = 0
        while not stop.is_set():
            i += 1
            mariadb.server.execute(
                f"UPDATE items SET qty = qty + 1 WHERE id = {100 + i % 50}",
                f"INSERT INTO items VALUES ({5000 + i}, 'live', 2.50, 1)",
                database=mariadb.name,
            )
            stop.wait(0.02)

    writer = threading.Thread(target=keep_writing, daemon=True)
    writer.start()
    try:
        report = reconcile_destination(
            destination,
            "d",
            spark,
            settings=destination.platform.reconcile.model_copy(update={"wait_seconds": 60}),
        )
    finally:
        stop.set()
        writer.join(timeout=10)
    assert report.status == "repaired", report.metadata()
    assert "lease holder" in (report.repaired_by or "")
    assert streaming.repairs == 1
    found = by_table(report)
    # the injected ones are always found; live keys may show up as suspects too, but the
    # repair confirms only real divergences (the others lagged or were in the binlog segment)
    assert found["items"][2] == 1
    assert found["pairs"][0] == 1
    assert report.repair is not None
    assert report.repair.upserts == {
        f"{mariadb.name}.items": 2,
        f"{mariadb.name}.pairs": 1,
        f"{mariadb.name}.typed": 1,
    }, report.metadata()
    assert sum(report.repair.deletes.values()) == 1
    assert report.repaired == 5
    assert not repair_inbox(DestinationLake.of(destination, "d")).requests.list(".json")

    # the holder keeps streaming after the repair
    mariadb.server.execute(
        "INSERT INTO items VALUES (9999, 'after', 1.00, 1)", database=mariadb.name
    )
    deadline = threading.Event()
    for _ in range(100):
        if (("id", 9999),) in replay(DestinationLake.of(destination, "d").change_log).tables.get(
            f"{mariadb.name}.items", {}
        ):
            break
        deadline.wait(0.2)
    assert_change_log_replays_to_source(destination, mariadb)
    apply_mirrors(spark, destination, mariadb.name)
    again = reconcile_destination(
        destination,
        "d",
        spark,
        settings=destination.platform.reconcile.model_copy(update={"wait_seconds": 60}),
    )
    assert again.differences == 0, again.metadata()


def test_nothing_is_written_where_the_lease_is_not_held(
    spark: SparkSession, destination: ConfigSet, mariadb: MariaDBDatabase
) -> None:
    """A holder that does not serve repairs (e.g. a snapshot): the request is withdrawn."""
    apply_mirrors(spark, destination, mariadb.name)
    inject(spark, destination, mariadb)
    lease = open_lease(destination.platform, destination.conf_dir, "d", address="other-node")
    lease.start()
    try:
        assert lease.acquire(timeout=10) is not None
        version = DeltaTable(DestinationLake.of(destination, "d").change_log).version()
        report = reconcile_destination(
            destination,
            "d",
            spark,
            settings=destination.platform.reconcile.model_copy(update={"wait_seconds": 2}),
        )
        assert report.status == "not_repaired", report.metadata()
        assert "other-node" in report.message
        assert report.differences == 4 + 1  # found, but not repaired
        assert report.repair is None
        assert DeltaTable(DestinationLake.of(destination, "d").change_log).version() == version
        inbox = repair_inbox(DestinationLake.of(destination, "d"))
        assert not inbox.requests.list(".json")  # withdrawn
    finally:
        lease.close()


def test_dagster_asset_check_reports_what_it_found_and_fixed(
    spark: SparkSession, destination: ConfigSet, mariadb: MariaDBDatabase
) -> None:
    from dagster import AssetCheckSeverity  # noqa: PLC0415 (Dagster only for this test's checks)

    from dagster_defs import build_definitions  # noqa: PLC0415 (Dagster only for this test's checks)

    apply_mirrors(spark, destination, mariadb.name)
    inject(spark, destination, mariadb)
    # One check per table (read from the source), all run by one reconciliation.
    job = build_definitions(str(destination.conf_dir)).resolve_job_def("cdc_reconcile")

    def by_table(result: Any) -> dict[str, Any]:
        return {e.asset_key.path[-1]: e for e in result.get_asset_check_evaluations()}

    first = by_table(job.execute_in_process())
    assert {"items", "pairs", "typed"} <= set(first)
    items = first["items"]
    assert items.passed is False
    assert items.severity == AssetCheckSeverity.WARN
    assert items.metadata["differences"].value == 3
    assert items.metadata["repair_upserts"].value == 2
    assert items.metadata["repair_deletes"].value == 1
    assert items.metadata["repaired_by"].value != "-"
    assert first["pairs"].metadata["repair_upserts"].value == 1
    assert first["typed"].metadata["repair_upserts"].value == 1
    assert sum(e.metadata["differences"].value for e in first.values()) == 5
    assert all(e.passed for t, e in first.items() if t not in {"items", "pairs", "typed"})

    apply_mirrors(spark, destination, mariadb.name)
    second = by_table(job.execute_in_process())
    assert all(e.passed for e in second.values())
    assert all(e.metadata["differences"].value == 0 for e in second.values())


def test_cli_reconcile_one_table(
    spark: SparkSession, destination: ConfigSet, mariadb: MariaDBDatabase
) -> None:
    apply_mirrors(spark, destination, mariadb.name)
    inject(spark, destination, mariadb)
    command = [
        sys.executable,
        "-m",
        "cdc_platform.cli",
        "reconcile",
        "--conf",
        str(destination.conf_dir),
        "--destination",
        "d",
        "--table",
        f"{mariadb.name}.items",
        "--json",
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert report["status"] == "repaired"
    assert [t["table"] for t in report["tables"]] == [f"{mariadb.name}.items"]
    assert (report["missing_in_mirror"], report["changed"], report["extra_in_mirror"]) == (1, 1, 1)
    bad = subprocess.run(
        [*command[:-3], "--table", "nodot"],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert bad.returncode == 2
    assert "expected db.table" in bad.stderr


def test_reconciliation_fills_in_rows_from_before_the_start(
    spark: SparkSession,
    mariadb: MariaDBDatabase,
    lake_root: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A destination started without a snapshot lacks the older rows: the reconciliation
    finds them all missing and the repair copies them (a snapshot by other means)."""
    from cdc_platform.testing.workload import Workload  # noqa: PLC0415 (this test's subject, imported where it is used)

    monkeypatch.setenv(PASSWORD_ENV, mariadb.user.password)
    conf = tmp_path / "conf"
    write_conf(
        conf,
        destination="d",
        server=mariadb.server,
        user=mariadb.user,
        database=mariadb.name,
        lake_root=lake_root,
        server_id=3102,
        extra_platform="reconcile: {chunk_size: 50}\n",
    )
    config = load_config(conf)
    workload = Workload(mariadb.server, mariadb.name, seed=9)
    workload.create_schema()
    workload.run_transactions(150)
    catch_up(config)  # starts at the current position: the 150 transactions are not in the log
    workload.run_transactions(100)
    catch_up(config)
    root = mirror_root(config.lake_root, "d")
    for table in ("customers", "orders"):
        apply_changes(
            spark,
            MirrorTarget(DestinationLake.of(config, "d").change_log, root, mariadb.name, table),
        )
    report = reconcile_destination(config, "d", spark)
    assert report.status == "repaired", report.metadata()
    assert sum(t.missing_in_mirror for t in report.tables) > 0
    result = replay(DestinationLake.of(config, "d").change_log)
    for table in ("customers", "orders"):
        assert result.tables[f"{mariadb.name}.{table}"] == source_rows(
            mariadb.server, mariadb.name, table
        ), table
    for table in ("customers", "orders"):
        apply_changes(
            spark,
            MirrorTarget(DestinationLake.of(config, "d").change_log, root, mariadb.name, table),
        )
    again = reconcile_destination(config, "d", spark)
    assert again.differences == 0, again.metadata()


def forge_request(inbox: RepairInbox, request_id: str, tables: list[dict[str, object]]) -> None:
    """A request file written by hand, in the inbox's format, without the platform's key."""
    item = {
        "format": 1,
        "id": request_id,
        "requester": "someone",
        "submitted_at": 0,
        "tables": tables,
        "signature": "00" * 32,
    }
    inbox.requests.child(f"{request_id}.json").write_text(json.dumps(item))


def test_hand_written_repair_requests_are_refused_and_delete_nothing(
    spark: SparkSession,
    destination: ConfigSet,
    mariadb: MariaDBDatabase,
    streaming: LeaseSupervisor,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The inbox is an authority to write deletes: only the platform's own requests count."""
    caplog.set_level("INFO")
    mariadb.server.execute(
        "SET sql_log_bin = 0", "DELETE FROM items WHERE id = 13", database=mariadb.name
    )
    inbox = repair_inbox(DestinationLake.of(destination, "d"))
    key = {"key": [13], "pk": '{"id":13}'}
    forge_request(
        inbox, "000000000000001-forged01", [{"db": mariadb.name, "table": "items", "keys": [key]}]
    )
    with pytest.raises(ReconcileError, match="refused"):
        inbox.wait("000000000000001-forged01", 60)
    forge_request(  # a table the destination does not capture, however it is signed
        inbox, "000000000000002-forged02", [{"db": "mysql", "table": "user", "keys": [key]}]
    )
    with pytest.raises(ReconcileError, match="refused"):
        inbox.wait("000000000000002-forged02", 60)
    assert streaming.repairs == 0
    assert "refused" in caplog.text
    deletes = [
        row
        for row in DeltaTable(DestinationLake.of(destination, "d").change_log)
        .to_pyarrow_table()
        .to_pylist()
        if row["op"] == "d"
    ]
    assert deletes == [], "a hand-written request made the holder write deletes"

    apply_mirrors(spark, destination, mariadb.name)  # the mirror still has id 13
    report = reconcile_destination(
        destination,
        "d",
        spark,
        settings=destination.platform.reconcile.model_copy(update={"wait_seconds": 60}),
    )
    assert report.status == "repaired", report.metadata()
    assert "lease holder" in (report.repaired_by or "")
    assert report.repair is not None
    assert report.repair.deletes[f"{mariadb.name}.items"] == 1
    assert streaming.repairs == 1


def test_a_lost_lease_interrupts_a_repair_blocked_on_the_source(
    destination: ConfigSet, mariadb: MariaDBDatabase, streaming: LeaseSupervisor
) -> None:
    """A repair whose read hangs on the source (here a table lock; a partition looks the same
    to the reader) ends as soon as the lease goes, and its requester hears of it."""
    mariadb.server.execute(
        "SET sql_log_bin = 0", "DELETE FROM items WHERE id = 13", database=mariadb.name
    )
    source = destination.destinations["d"].config.source
    inbox = repair_inbox(DestinationLake.of(destination, "d"), source)
    locker = mariadb.server.connect(mariadb.name)
    try:
        with locker.cursor() as cur:
            cur.execute("LOCK TABLES items WRITE")
        request_id = inbox.submit(
            [RepairTable(mariadb.name, "items", [RepairKey([13], '{"id":13}')])]
        )
        wait_for(
            lambda: not inbox.requests.child(f"{request_id}.json").exists(),
            "the holder to claim the request",
        )
        operator = open_lease(destination.platform, destination.conf_dir, "d", address="operator")
        try:
            assert operator.request_release() is not None
        finally:
            operator.close()
        wait_for(
            inbox.results.child(f"{request_id}.json").exists,
            "the repair to be interrupted by the lost lease and answer",
            timeout=30,
        )
        with pytest.raises(ReconcileError, match="lease"):
            inbox.wait(request_id, 0)
    finally:
        locker.close()  # ends the lock
    assert streaming.repairs == 0
    deletes = [
        row
        for row in DeltaTable(DestinationLake.of(destination, "d").change_log)
        .to_pyarrow_table()
        .to_pylist()
        if row["op"] == "d"
    ]
    assert deletes == [], "the deposed holder wrote its repair"


def test_a_source_refusal_fails_the_checks_not_the_dagster_step(
    spark: SparkSession,
    mariadb: MariaDBDatabase,
    lake_root: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A server error during the keyset read (here: a user who may see `items` but not
    SELECT it) comes out of the one MySQL boundary as the engine's error, so the Dagster
    checks report it (ERROR, not run) instead of a raw pymysql error failing the step."""
    from dagster import AssetCheckSeverity  # noqa: PLC0415 (Dagster only for this test's checks)

    from dagster_defs import build_definitions  # noqa: PLC0415 (Dagster only for this test's checks)

    monkeypatch.setenv(PASSWORD_ENV, mariadb.user.password)
    db = mariadb.name
    mariadb.server.execute(
        "CREATE TABLE items (id INT PRIMARY KEY, name VARCHAR(40))",
        "CREATE TABLE pairs (a INT, b VARCHAR(10), v INT, PRIMARY KEY (a, b))",
        "INSERT INTO items VALUES (1, 'one'), (2, 'two')",
        "INSERT INTO pairs VALUES (1, 'x', 1)",
        database=db,
    )
    narrow = ReplicationUser(f"narrow_{db[-6:]}", mariadb.user.password)
    conf = tmp_path / "conf"
    write_conf(
        conf,
        destination="d",
        server=mariadb.server,
        user=narrow,
        database=db,
        lake_root=lake_root,
        server_id=3102,
        extra_platform=sqlite_lease(tmp_path),
    )
    config = load_config(conf)
    assert not config.errors, config.errors
    # The change log and the mirrors, written by the full-privilege user.
    full = config.destinations["d"].config
    full = full.model_copy(
        update={"source": full.source.model_copy(update={"user": mariadb.user.name})}
    )
    SnapshotRunner(
        WriteTerm("d", full, DestinationLake.of(config, "d")),
        DestinationLake.at(lake_root, "d").snapshot_state,
        tables=[f"{db}.items", f"{db}.pairs"],
    ).run()
    root = mirror_root(config.lake_root, "d")
    for table in ("items", "pairs"):
        apply_changes(
            spark, MirrorTarget(DestinationLake.of(config, "d").change_log, root, db, table)
        )

    mariadb.server.execute(
        f"CREATE USER '{narrow.name}'@'%' IDENTIFIED BY '{narrow.password}'",
        f"GRANT SELECT ON `{db}`.pairs TO '{narrow.name}'@'%'",
        f"GRANT INSERT ON `{db}`.items TO '{narrow.name}'@'%'",
    )
    try:
        with pytest.raises(SourceSettingsError, match=r"^reconciliation: .*lacks a privilege"):
            reconcile_destination(config, "d", spark, tables=[f"{db}.items"])

        job = build_definitions(str(conf)).resolve_job_def("cdc_reconcile")
        result = job.execute_in_process()
        evaluations = {e.asset_key.path[-1]: e for e in result.get_asset_check_evaluations()}
        assert set(evaluations) == {"items", "pairs"}
        for evaluation in evaluations.values():
            assert evaluation.passed is False
            assert evaluation.severity == AssetCheckSeverity.ERROR
            assert "lacks a privilege" in str(evaluation.description)
            assert evaluation.metadata["status"].value == "not_run"
    finally:
        mariadb.server.execute(f"DROP USER IF EXISTS '{narrow.name}'@'%'")
