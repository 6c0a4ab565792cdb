"""Every writer commits by one protocol: the snapshot CLI and the reconciliation's own-lease
repair list a DDL they commit for a re-read, every checkpoint names its server, and a resumed
snapshot tells its own chunk from another writer's commit of the same batch number.

Real MariaDB (binlog), real Delta change log, real leases (SQLite).
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from deltalake import DeltaTable

from cdc_platform.backfill.progress import SnapshotObservers
from cdc_platform.backfill.repair import RepairKey, RepairTable, repair_keys
from cdc_platform.backfill.reread import pending_rereads
from cdc_platform.backfill.snapshot import SnapshotRunner
from cdc_platform.config import ConfigSet, load_config
from cdc_platform.config.instance import SnapshotSettings
from cdc_platform.coordination.factory import open_lease
from cdc_platform.errors import LeaseLostError, ReconcileError
from cdc_platform.reconcile.repair_route import repair_with_own_lease
from cdc_platform.runtime import DestinationRuntime
from cdc_platform.sink import Checkpoint
from cdc_platform.sink.destination_lake import DestinationLake
from cdc_platform.sink.term import WriteTerm
from cdc_platform.source.values import dumps
from cdc_platform.testing.destinations import PASSWORD_ENV, write_conf
from cdc_platform.testing.ha import fast_database_lease
from tests.conftest import MariaDBDatabase

pytestmark = pytest.mark.integration

ROWS = 250


@pytest.fixture
def destination(
    mariadb: MariaDBDatabase, lake_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> ConfigSet:
    """Destination `d` over table `t` (250 rows written before its start: only a snapshot or
    a repair brings them into the change log), with a checkpoint."""
    monkeypatch.setenv(PASSWORD_ENV, mariadb.user.password)
    conf = tmp_path / "conf"
    write_conf(
        conf,
        destination="d",
        server=mariadb.server,
        user=mariadb.user,
        database=mariadb.name,
        lake_root=lake_root,
        server_id=3201,
        extra_platform=fast_database_lease(f"sqlite:///{tmp_path}/lease.db"),
    )
    config = load_config(conf)
    assert not config.errors, config.errors
    mariadb.server.execute(
        "CREATE TABLE t (id INT PRIMARY KEY, v INT)",
        f"INSERT INTO t SELECT seq, seq FROM seq_1_to_{ROWS}",
        database=mariadb.name,
    )
    summary = DestinationRuntime(term(config)).run(exit_when_idle_seconds=1.0)
    assert summary.error is None, summary
    return config


def term(configs: ConfigSet, **fields: object) -> WriteTerm:
    """The destination's term in its lake (epoch 0, no lease), with ``fields`` replaced."""
    made = WriteTerm.in_lake("d", configs.destinations["d"].config, configs.lake, epoch=0)
    return replace(made, **fields)


def checkpoint(config: ConfigSet) -> Checkpoint:
    sink = term(config).open_change_log()
    try:
        found = sink.recover()
    finally:
        sink.close()
    assert found is not None
    return found


def snapshot(config: ConfigSet, db: str, **fields: object) -> SnapshotRunner:
    return SnapshotRunner(
        term(config, **fields),
        DestinationLake.at(config.lake.uri, "d").snapshot_state,
        tables=[f"{db}.t"],
        settings=SnapshotSettings(chunk_size=100),
    )


def repair_request(db: str, *ids: int) -> list[RepairTable]:
    return [RepairTable(db, "t", [RepairKey([i], dumps({"id": i})) for i in ids])]


def r_keys(config: ConfigSet) -> set[int]:
    rows = (
        DeltaTable(DestinationLake.of(config, "d").change_log)
        .to_pyarrow_table(columns=["op", "pk"])
        .to_pylist()
    )
    return {int(r["pk"].split(":")[1].rstrip("}")) for r in rows if r["op"] == "r"}


ADD_COLUMN = "ALTER TABLE t ADD COLUMN colour VARCHAR(8) NOT NULL DEFAULT 'red'"


# -- item: DDL noted by every writer ---------------------------------------------------------


def test_the_snapshot_cli_lists_a_ddl_it_commits_for_a_reread(
    destination: ConfigSet, mariadb: MariaDBDatabase
) -> None:
    """`cdc-platform snapshot` streams the binlog into the change log with its chunks; an
    ADD COLUMN ... DEFAULT it commits must be listed, or old mirror rows keep NULL."""
    mariadb.server.execute(ADD_COLUMN, database=mariadb.name)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "cdc_platform.cli",
            "snapshot",
            "--conf",
            str(destination.conf_dir),
            "--destination",
            "d",
            "--table",
            f"{mariadb.name}.t",
            "--chunk-size",
            "100",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    ddl = (
        DeltaTable(DestinationLake.of(destination, "d").change_log)
        .to_pyarrow_table(columns=["op"])
        .to_pylist()
    )
    assert {"op": "ddl"} in ddl, "the snapshot committed the ALTER"
    assert pending_rereads(DestinationLake.of(destination, "d")) == {f"{mariadb.name}.t"}


def test_the_own_lease_repair_lists_a_ddl_it_commits_for_a_reread(
    destination: ConfigSet, mariadb: MariaDBDatabase
) -> None:
    mariadb.server.execute(ADD_COLUMN, database=mariadb.name)
    lease = open_lease(destination.platform, destination.conf_dir, "d", address="reconcile")
    lease.start()
    try:
        result, said = repair_with_own_lease(
            destination, "d", repair_request(mariadb.name, 5), lease, 10.0
        )
    finally:
        lease.close()
    assert result is not None, said
    assert result.upserts == {f"{mariadb.name}.t": 1}
    assert pending_rereads(DestinationLake.of(destination, "d")) == {f"{mariadb.name}.t"}


# -- item: the server on every checkpoint ----------------------------------------------------


def test_side_commits_keep_the_server_in_the_checkpoint(
    destination: ConfigSet, mariadb: MariaDBDatabase
) -> None:
    """A snapshot's and a repair's commits carry the server their position is in, so a
    primary switched on file/position is still detected at the next start."""
    started = checkpoint(destination)
    assert started.resume.server is not None
    mariadb.server.execute("INSERT INTO t VALUES (1001, 1)", database=mariadb.name)
    snapshot(destination, mariadb.name).run()
    after_snapshot = checkpoint(destination)
    assert after_snapshot.batch_seq > started.batch_seq
    assert after_snapshot.resume.binlog_position > started.resume.binlog_position
    assert after_snapshot.resume.server == started.resume.server
    mariadb.server.execute("INSERT INTO t VALUES (1002, 1)", database=mariadb.name)
    repair_keys(term(destination), repair_request(mariadb.name, 7))
    after_repair = checkpoint(destination)
    assert after_repair.batch_seq > after_snapshot.batch_seq
    assert after_repair.resume.server == started.resume.server


# -- item: a resumed snapshot tells its chunk from a repair's batch --------------------------


def test_a_resumed_snapshot_does_not_take_a_repair_batch_for_its_chunk(
    destination: ConfigSet, mariadb: MariaDBDatabase
) -> None:
    """The snapshot is interrupted right before its first chunk's commit (batch N pending);
    a repair then commits batch N with an `r` row of the same table. The resumed snapshot must
    read its first chunk again instead of counting it done."""
    calls = 0

    def fail_first_commit() -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise LeaseLostError("d", 0, "interrupted for the test")

    pending_batch = checkpoint(destination).batch_seq + 1
    with pytest.raises(LeaseLostError):
        snapshot(destination, mariadb.name, commit_gate=fail_first_commit).run()
    assert checkpoint(destination).batch_seq == pending_batch - 1
    repair_keys(term(destination), repair_request(mariadb.name, 5))
    assert checkpoint(destination).batch_seq == pending_batch, "the repair took batch N"
    result = snapshot(destination, mariadb.name).run()
    assert result.resumed
    assert r_keys(destination) == set(range(1, ROWS + 1)), "rows of the first chunk lost"


# -- item: the own-lease repair commits its backlog in bounded parts -------------------------


def backlog(db: MariaDBDatabase, transactions: int) -> None:
    """``transactions`` one-row transactions (of ids 1..50) the destination has not
    streamed."""
    db.server.execute(
        *[f"UPDATE t SET v = v + 1 WHERE id = {1 + i % 50}" for i in range(transactions)],
        database=db.name,
    )


def test_a_repair_commits_the_backlog_since_the_checkpoint_in_bounded_parts(
    destination: ConfigSet, mariadb: MariaDBDatabase
) -> None:
    started = checkpoint(destination)
    backlog(mariadb, 300)
    config = destination.destinations["d"].config
    small = config.model_copy(
        update={"snapshot": config.snapshot.model_copy(update={"segment_events": 50})}
    )
    result = repair_keys(term(destination, config=small), repair_request(mariadb.name, 99))
    assert len(result.batches) > 6, result.batches
    rows = DeltaTable(DestinationLake.of(destination, "d").change_log).to_pyarrow_table(
        columns=["batch_seq", "op"]
    )
    per_batch: dict[int, int] = {}
    for row in rows.to_pylist():
        if row["batch_seq"] > started.batch_seq:
            per_batch[row["batch_seq"]] = per_batch.get(row["batch_seq"], 0) + 1
    assert sum(per_batch.values()) == 300 + 1  # every update, and the repair's `r` row
    assert max(per_batch.values()) <= 50 // 2 + 1, per_batch  # 25 transactions of 2 events


def test_a_repair_refuses_a_checkpoint_far_behind_the_source(
    destination: ConfigSet, mariadb: MariaDBDatabase
) -> None:
    started = checkpoint(destination)
    backlog(mariadb, 300)
    with pytest.raises(ReconcileError, match=r"behind the source.*cdc-platform run"):
        repair_keys(term(destination), repair_request(mariadb.name, 99), max_backlog_bytes=10_000)
    assert checkpoint(destination).batch_seq == started.batch_seq, "nothing is written"
    assert repair_keys(
        term(destination), repair_request(mariadb.name, 99), max_backlog_bytes=10_000_000
    ).upserts == {f"{mariadb.name}.t": 1}


# -- item: a durable resume position ---------------------------------------------------------


def test_the_resume_position_of_commits_without_rows_survives_log_cleanup(
    destination: ConfigSet, mariadb: MariaDBDatabase
) -> None:
    """The newest commits hold no rows (traffic of tables the destination does not capture);
    log cleanup removes their metadata and the server purges the binlog of the last row. The
    destination must resume at its newest position, not at the last row's purged one."""
    other = f"{mariadb.name}_other"
    mariadb.server.execute(
        "INSERT INTO t VALUES (2001, 1)", database=mariadb.name
    )  # a row: the last row's position is in this binlog file
    assert DestinationRuntime(term(destination)).run(exit_when_idle_seconds=1.0).error is None
    with_row = checkpoint(destination)
    mariadb.server.execute(
        "FLUSH BINARY LOGS",
        f"CREATE DATABASE {other}",
        f"CREATE TABLE {other}.x (id INT PRIMARY KEY)",
        f"INSERT INTO {other}.x VALUES (1), (2)",
    )
    assert DestinationRuntime(term(destination)).run(exit_when_idle_seconds=1.0).error is None
    newest = checkpoint(destination)
    assert newest.batch_seq > with_row.batch_seq
    assert newest.last_seq == with_row.last_seq, "no rows since"
    assert newest.resume.file != with_row.resume.file
    table = DeltaTable(DestinationLake.of(destination, "d").change_log)
    table.alter.set_table_properties({"delta.logRetentionDuration": "interval 0 seconds"})
    table.create_checkpoint()
    table.cleanup_metadata()
    assert all(info.get("cdc.batch_seq") is None for info in DeltaTable(table.table_uri).history())
    mariadb.server.execute(f"PURGE BINARY LOGS TO '{newest.resume.file}'")
    mariadb.server.execute("INSERT INTO t VALUES (2002, 1)", database=mariadb.name)
    recovered = checkpoint(destination)
    assert recovered.resume.binlog_position == newest.resume.binlog_position
    summary = DestinationRuntime(term(destination)).run(exit_when_idle_seconds=1.0)
    assert summary.error is None, summary
    pks = (
        DeltaTable(DestinationLake.of(destination, "d").change_log)
        .to_pyarrow_table(columns=["pk"])
        .to_pylist()
    )
    assert {"pk": dumps({"id": 2002})} in pks


# -- item: chunks bounded by bytes -----------------------------------------------------------

BIG_ROWS = 10
BIG_ROW_BYTES = 200_000


def with_chunk_bytes(configs: ConfigSet, chunk_bytes: int) -> WriteTerm:
    config = configs.destinations["d"].config
    snapshot = config.snapshot.model_copy(update={"chunk_bytes": chunk_bytes})
    return term(configs, config=config.model_copy(update={"snapshot": snapshot}))


def big_rows(db: MariaDBDatabase) -> None:
    """Table `big`: 10 rows of 200 kB each, written outside the binlog (only a snapshot or a
    repair brings them into the change log)."""
    db.server.execute(
        "CREATE TABLE big (id INT PRIMARY KEY, payload LONGBLOB)",
        "SET sql_log_bin = 0",
        f"INSERT INTO big SELECT seq, REPEAT('x', {BIG_ROW_BYTES}) FROM seq_1_to_{BIG_ROWS}",
        database=db.name,
    )


def test_snapshot_chunks_are_bounded_by_bytes(
    destination: ConfigSet, mariadb: MariaDBDatabase
) -> None:
    """A chunk of 100 rows of 200 kB would hold 20 MB (of multi-MB rows, gigabytes); a budget
    of three rows holds 2 of them (the third passes it), whatever the chunk size allows."""
    big_rows(mariadb)
    chunks: list[int] = []
    runner = SnapshotRunner(
        with_chunk_bytes(destination, 3 * BIG_ROW_BYTES),
        DestinationLake.at(destination.lake.uri, "d").snapshot_state,
        tables=[f"{mariadb.name}.big"],
        settings=SnapshotSettings(chunk_size=100, chunk_bytes=3 * BIG_ROW_BYTES),
        observers=SnapshotObservers(on_progress=lambda p: chunks.append(p.chunk_rows)),
    )
    result = runner.run()
    assert result.rows_written == BIG_ROWS
    assert chunks
    assert max(chunks) <= 3, chunks
    rows = DeltaTable(DestinationLake.of(destination, "d").change_log).to_pyarrow_table(
        columns=["op", "table", "pk"]
    )
    assert {r["pk"] for r in rows.to_pylist() if r["op"] == "r" and r["table"] == "big"} == {
        dumps({"id": i}) for i in range(1, BIG_ROWS + 1)
    }


def test_repair_reads_are_bounded_by_bytes(
    destination: ConfigSet, mariadb: MariaDBDatabase
) -> None:
    big_rows(mariadb)
    started = checkpoint(destination)
    request = [
        RepairTable(
            mariadb.name, "big", [RepairKey([i], dumps({"id": i})) for i in range(1, BIG_ROWS + 1)]
        )
    ]
    result = repair_keys(with_chunk_bytes(destination, 3 * BIG_ROW_BYTES), request)
    assert result.upserts == {f"{mariadb.name}.big": BIG_ROWS}
    rows = DeltaTable(DestinationLake.of(destination, "d").change_log).to_pyarrow_table(
        columns=["batch_seq", "op"]
    )
    per_batch: dict[int, int] = {}
    for row in rows.to_pylist():
        if row["batch_seq"] > started.batch_seq and row["op"] == "r":
            per_batch[row["batch_seq"]] = per_batch.get(row["batch_seq"], 0) + 1
    assert per_batch
    assert max(per_batch.values()) <= 3, per_batch
