"""The source's connection faults end to end: a source that is down when a run starts, the
fail-fast `config check --connect`, and resuming after the source primary was switched."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
from deltalake import DeltaTable

from cdc_platform.backfill.new_tables import snapshot_new_tables
from cdc_platform.cli import main
from cdc_platform.config.instance import InstanceConfig
from cdc_platform.config.start import StartConfig
from cdc_platform.errors import SourceConnectionError, SourceServerChangedError
from cdc_platform.events import PreparedXa, ResumePosition, ServerIdentity
from cdc_platform.runtime import DestinationRuntime, RunSummary
from cdc_platform.sink import DeltaChangeLog
from cdc_platform.sink.destination_lake import DestinationLake
from cdc_platform.sink.report import CommitReport
from cdc_platform.sink.term import WriteTerm
from cdc_platform.source import BinlogSource
from cdc_platform.testing.destinations import PASSWORD_ENV, instance_config, write_conf
from cdc_platform.testing.mariadb import MariaDBServer, ReplicationUser
from cdc_platform.testing.processes import stop_process, wait_for
from cdc_platform.testing.replay import has_commits, replay
from cdc_platform.testing.tcp_proxy import TcpProxy
from tests.conftest import MariaDBDatabase

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


class Running:
    """The runtime of ``term`` in a background thread, with its commit reports."""

    def __init__(self, term: WriteTerm) -> None:
        self.reports: list[CommitReport] = []
        self.runtime = DestinationRuntime(replace(term, on_commit=self.reports.append))
        self.summary: RunSummary | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        self.summary = self.runtime.run()

    def wait_for(self, predicate: Callable[[], bool], timeout: float = 60.0) -> None:
        """:func:`wait_for` ``predicate`` while the runtime runs (its end fails the wait)."""

        def met() -> bool:
            if predicate():
                return True
            assert self.thread.is_alive(), f"runtime ended early: {self.summary}"
            return False

        wait_for(met, "the condition", timeout=timeout)

    def rows(self) -> int:
        return sum(r.rows for r in self.reports)

    def stop(self) -> RunSummary:
        self.runtime.request_stop("test done")
        self.thread.join(timeout=60)
        assert self.summary is not None
        return self.summary


def _shop(server: MariaDBServer) -> str:
    """A fresh server with a shop.t table and the CDC user; returns the user's password."""
    server.start()
    user = server.create_replication_user("cdc", "Pw-not-in-logs-42")
    server.execute("CREATE DATABASE shop", "CREATE TABLE shop.t (id INT PRIMARY KEY)")
    return user.password


def _config(server: MariaDBServer, **store: object) -> InstanceConfig:
    return instance_config(server, "cdc", [r"shop\..*"], server_id=2301, **store)


# -- a source that is down when the run starts --------------------------------------------------


def test_a_run_started_while_the_source_is_down_waits_for_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    server = MariaDBServer(tmp_path / "db")
    password = _shop(server)
    server.stop()
    monkeypatch.setenv(PASSWORD_ENV, password)
    layout = DestinationLake.at(tmp_path / "lake", "d")
    uri = layout.change_log
    address = f"{server.host}:{server.port}"
    try:
        with caplog.at_level(logging.INFO):
            running = Running(WriteTerm("d", _config(server), layout))

            def retried() -> bool:
                warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
                return sum(address in m for m in warnings) >= 2

            running.wait_for(retried)
            assert running.runtime.metrics().state == "waiting for the source"
            server.start()  # the database is back (same address)
            running.wait_for(lambda: has_commits(uri))
            server.execute("INSERT INTO shop.t VALUES (1), (2)")
            running.wait_for(lambda: running.rows() >= 2)
            summary = running.stop()
    finally:
        server.stop()
    assert summary.error is None
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    print("\n".join(warnings[:2]))
    assert any("not reachable at start (attempt 1)" in m and address in m for m in warnings)
    assert password not in caplog.text
    result = replay(uri)
    assert sorted(row["id"] for row in result.tables["shop.t"].values()) == [1, 2]


def test_cli_run_with_start_initial_waits_for_a_stopped_source(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`cdc-platform run` with the default `start: initial` against a source that is down:
    the snapshot's side work at the term's start retries (with the source backoff) instead of
    ending the process, then copies the table and streams once the database is back."""
    server = MariaDBServer(tmp_path / "db")
    password = _shop(server)
    server.execute("INSERT INTO shop.t VALUES (1), (2)")
    server.stop()
    conf, lake = tmp_path / "conf", tmp_path / "lake"
    write_conf(
        conf,
        destination="d",
        server=server,
        user=ReplicationUser("cdc", password),
        database="shop",
        lake_root=lake,
        start="{mode: initial}",
    )
    log_file = tmp_path / "run.log"
    address = f"{server.host}:{server.port}"
    uri = str(lake / "d" / "changes")
    with log_file.open("ab") as out:
        command = [sys.executable, "-m", "cdc_platform.cli", "run", "--conf", str(conf)]
        proc = subprocess.Popen(
            [*command, "--destination", "d"],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, PASSWORD_ENV: password},
            start_new_session=True,
        )
    try:

        def logged(text: str, times: int = 1) -> bool:
            assert proc.poll() is None, log_file.read_text()[-3000:]
            return log_file.read_text().count(text) >= times

        wait_for(lambda: logged(address, times=2), "two reconnects logged", timeout=120)
        server.start()  # the database is back (same address)
        wait_for(lambda: _ids_if_any(uri) == [1, 2], "ids 1 and 2", timeout=120)
        server.execute("INSERT INTO shop.t VALUES (3)")
        wait_for(lambda: _ids_if_any(uri) == [1, 2, 3], "ids 1 to 3", timeout=120)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, log_file.read_text()[-3000:]
    finally:
        stop_process(proc)
        server.stop()
    text = log_file.read_text()
    print(text[-2000:])
    assert password not in text


def test_a_term_start_asks_the_source_for_new_tables_only_after_a_ddl(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The captured-tables probe of `start: initial` at a term's start is skipped while no
    DDL reached the change log since the tables were listed (nothing can have changed): a
    restart then does not need the source for it. After a CREATE TABLE it lists again."""
    server = MariaDBServer(tmp_path / "db")
    password = _shop(server)
    monkeypatch.setenv(PASSWORD_ENV, password)
    server.execute("INSERT INTO shop.t VALUES (1), (2)")
    conf, lake = tmp_path / "conf", tmp_path / "lake"
    write_conf(
        conf, destination="d", server=server, user=ReplicationUser("cdc", password),
        database="shop", lake_root=lake, start="{mode: initial}",
    )  # fmt: skip
    argv = ["run", "--conf", str(conf), "--destination", "d", "--exit-when-idle", "1"]
    config = _config(server).model_copy(update={"start": StartConfig(mode="initial")})
    term = WriteTerm("d", config, DestinationLake.at(lake, "d"))
    try:
        assert main(argv) == 0
        server.stop()
        assert snapshot_new_tables(term) is None  # the source is not asked
        server.start()
        server.execute("CREATE TABLE shop.u (id INT PRIMARY KEY)")
        assert main(argv) == 0  # streams the CREATE TABLE into the change log
        server.stop()
        with pytest.raises(SourceConnectionError):  # now it must list the tables again
            snapshot_new_tables(term)
    finally:
        server.stop()
    assert _ids_if_any(term.layout.change_log) == [1, 2]


def _ids_if_any(uri: str) -> list[int]:
    """The replayed ids of shop.t, [] while the change log has none yet."""
    if not has_commits(uri):
        return []
    table = replay(uri).tables.get("shop.t")
    return sorted(int(row["id"]) for row in table.values()) if table else []


def test_config_check_connect_reports_each_destination(
    mariadb: MariaDBDatabase,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv(PASSWORD_ENV, mariadb.user.password)
    conf, lake = tmp_path / "conf", tmp_path / "lake"
    down = MariaDBServer(tmp_path / "never-started")
    for name, server, server_id in (("up", mariadb.server, 2302), ("down", down, 2303)):
        write_conf(
            conf,
            destination=name,
            server=server,
            user=mariadb.user,
            database=mariadb.name,
            lake_root=lake,
            server_id=server_id,
        )
    # Without --connect the configuration alone is checked: both are fine.
    assert main(["config", "check", "--conf", str(conf)]) == 0
    capsys.readouterr()
    assert main(["config", "check", "--conf", str(conf), "--connect"]) == 1
    out = capsys.readouterr().out
    print(out)
    lines = out.splitlines()
    up = lines.index(next(line for line in lines if line.startswith("up: OK")))
    assert lines[up + 1].startswith(
        f"  source {mariadb.server.host}:{mariadb.server.port} (binlog): connected, "
    )
    assert "server_id 1, binlog at mysql-bin." in lines[up + 1]
    # the unreachable one says ERROR on its first line, not OK then an error below it
    dn = lines.index(next(line for line in lines if line.startswith("down: ERROR")))
    assert lines[dn + 1].startswith(
        f"  source {down.host}:{down.port} (binlog): ERROR cannot reach"
    )
    assert mariadb.user.password not in out
    assert not Path(lake, "down").exists(), "a check must not create anything"


# -- a switched source primary ----------------------------------------------------------------


def _replicate(replica: MariaDBServer, primary: MariaDBServer, password: str) -> None:
    replica.execute(
        f"CHANGE MASTER TO MASTER_HOST='{primary.host}', MASTER_PORT={primary.port}, "
        f"MASTER_USER='cdc', MASTER_PASSWORD='{password}', MASTER_USE_GTID=slave_pos",
        "START SLAVE",
    )


def _caught_up(replica: MariaDBServer, primary: MariaDBServer) -> bool:
    wanted = primary.query("SELECT @@gtid_binlog_pos")[0][0]
    return bool(replica.query("SELECT @@gtid_slave_pos")[0][0] == wanted)


def _by_gtid(config: InstanceConfig) -> InstanceConfig:
    source = config.source.model_copy(update={"resume_by": "gtid"})
    return config.model_copy(update={"source": source})


def _ids(uri: str) -> list[int]:
    result = replay(uri)
    assert not result.duplicates
    assert not result.seq_gaps
    return sorted(int(row["id"]) for row in result.tables["shop.t"].values())


def test_a_switched_primary_refuses_file_positions_and_continues_by_gtid(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A checkpoint taken on primary A; B, a replica of A with a binlog of its own (same file
    names, other contents), is promoted and the destination pointed at it."""
    a = MariaDBServer(tmp_path / "a", server_id=11)
    b = MariaDBServer(tmp_path / "b", server_id=12, extra_args=["--log-slave-updates=ON"])
    try:
        password = _shop(a)
        b.start()
        _replicate(b, a, password)
        monkeypatch.setenv(PASSWORD_ENV, password)
        layout = DestinationLake.at(tmp_path / "lake", "d")
        uri = layout.change_log
        running = Running(WriteTerm("d", _config(a), layout))
        running.wait_for(lambda: has_commits(uri))
        a.execute("INSERT INTO shop.t VALUES (1), (2)", "INSERT INTO shop.t VALUES (3)")
        running.wait_for(lambda: running.rows() >= 3)
        assert running.stop().error is None
        sink = DeltaChangeLog(uri, "d")
        checkpoint = sink.recover()
        assert checkpoint is not None
        recorded = checkpoint.resume
        wait_for(lambda: _caught_up(b, a), "the replica to catch up")
        b.execute("STOP SLAVE")  # promoted
        # The premise: B has a binlog of the same name, long enough to hold the position.
        logs_b = {str(r[0]): int(r[1]) for r in b.query("SHOW BINARY LOGS")}
        assert recorded.file in logs_b
        assert recorded.pos <= logs_b[recorded.file], logs_b
        version = DeltaTable(uri).version()

        refused = DestinationRuntime(WriteTerm("d", _config(b), layout)).run(
            exit_when_idle_seconds=2
        )
        print(f"file/pos resume on B: {refused.error!r}")
        assert isinstance(refused.error, SourceServerChangedError)
        assert refused.error.transient is False
        message = str(refused.error)
        assert (
            f"{recorded.file}:{recorded.pos} is a position in the binlog of server_id 11" in message
        )
        assert f"{b.host}:{b.port} as 'cdc' is server_id 12" in message
        assert "resume by GTID (source.resume_by: gtid" in message
        assert DeltaTable(uri).version() == version, "a refused start must not write"
        assert recorded.server == ServerIdentity(11, gtid_domain_id=0)

        running = Running(WriteTerm("d", _by_gtid(_config(b)), layout))
        b.execute("INSERT INTO shop.t VALUES (4)")
        running.wait_for(lambda: running.rows() >= 1)
        assert running.stop().error is None
        assert _ids(uri) == [1, 2, 3, 4]
        moved = sink.recover()
        assert moved is not None
        assert moved.resume.server == ServerIdentity(12, gtid_domain_id=0)
        # From now on the checkpoint names B: file/pos resumes on B work again.
        b.execute("INSERT INTO shop.t VALUES (5)")
        again = DestinationRuntime(WriteTerm("d", _config(b), layout)).run(exit_when_idle_seconds=2)
        assert again.error is None
        assert _ids(uri) == [1, 2, 3, 4, 5]
    finally:
        b.stop()
        a.stop()


def test_a_checkpoint_without_server_identity_resumes_and_records_it(
    mariadb: MariaDBDatabase, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Checkpoints written before identities were kept still resume; the next commit adds it."""
    monkeypatch.setenv(PASSWORD_ENV, mariadb.user.password)
    server, db = mariadb.server, mariadb.name
    server.execute("CREATE TABLE t (id INT PRIMARY KEY)", database=db)
    config = instance_config(server, "cdc", [rf"{db}\..*"], server_id=2304)
    here = BinlogSource(config.source, password=mariadb.user.password).current_position()
    assert here.server is not None
    old = ResumePosition(here.file, here.pos, here.gtid_set)
    assert "server" not in old.to_json()
    layout = DestinationLake.at(tmp_path / "lake", "d")
    uri = layout.change_log
    sink = DeltaChangeLog(uri, "d")
    sink.commit((), batch_seq=1, resume=old, epoch=0)
    before = sink.recover()
    assert before is not None
    assert before.resume.server is None
    server.execute("INSERT INTO t VALUES (1)", database=db)
    summary = DestinationRuntime(WriteTerm("d", config, layout)).run(exit_when_idle_seconds=2)
    assert summary.error is None
    after = sink.recover()
    assert after is not None
    assert after.resume.server == ServerIdentity(1, gtid_domain_id=0)
    assert replay(uri).tables[f"{db}.t"]


def _gtid_event_at(server: MariaDBServer, gtid: str) -> tuple[str, int] | None:
    """(file, position) of the GTID event of ``gtid`` in ``server``'s binlog."""
    for name, _size in server.query("SHOW BINARY LOGS"):
        for row in server.query(f"SHOW BINLOG EVENTS IN '{name}'"):
            if row[2] == "Gtid" and str(row[5]).endswith(f"GTID {gtid}"):
                return str(name), int(row[1])
    return None


def _replica_of(a: MariaDBServer, b: MariaDBServer) -> str:
    """A with shop.t, B replicating it; B's binlog first holds transactions of its own (in
    another GTID domain), so A's binlog positions are other events on B."""
    password = _shop(a)
    b.start()
    with b.connect() as conn, conn.cursor() as cur:
        cur.execute("SET SESSION gtid_domain_id = 7")
        cur.execute("CREATE DATABASE b_only")
        cur.execute("CREATE TABLE b_only.pad (x TEXT)")
        cur.execute("INSERT INTO b_only.pad VALUES (REPEAT('x', 3000))")
    _replicate(b, a, password)
    return password


def _prepare_xa(server: MariaDBServer, xid: str) -> None:
    """XA transaction ``xid`` inserting ids 10 and 11, prepared (left so when disconnected)."""
    with server.connect("shop") as conn, conn.cursor() as cur:
        cur.execute(f"XA START '{xid}'")
        cur.execute("INSERT INTO t VALUES (10), (11)")
        cur.execute(f"XA END '{xid}'")
        cur.execute(f"XA PREPARE '{xid}'")


def _prepared_listed(uri: str, xid: str) -> tuple[ResumePosition, PreparedXa]:
    checkpoint = DeltaChangeLog(uri, "d").recover()
    assert checkpoint is not None
    (prepared,) = checkpoint.resume.xa_prepared
    assert prepared.xid == f"X'{xid.encode().hex()}',X'',1"
    assert prepared.gtid is not None
    return checkpoint.resume, prepared


def _commit_on_b_and_resume(b: MariaDBServer, xid: str, uri: str, *ids: int) -> None:
    """XA COMMIT on B, the destination resumed on B by GTID: the XA rows come out."""
    b.execute(f"XA COMMIT '{xid}'")
    layout = DestinationLake.at(Path(uri).parent.parent, "d")  # uri: <lake>/d/changes
    summary = DestinationRuntime(WriteTerm("d", _by_gtid(_config(b)), layout)).run(
        exit_when_idle_seconds=2
    )
    assert summary.error is None, summary.error
    assert _ids(uri) == sorted([*ids, 10, 11])
    moved = DeltaChangeLog(uri, "d").recover()
    assert moved is not None
    assert moved.resume.server == ServerIdentity(12, gtid_domain_id=0)
    assert moved.resume.xa_prepared == ()


def test_a_prepared_xa_is_read_again_at_its_gtid_on_a_switched_primary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A checkpoint on primary A lists an XA transaction prepared there; B is promoted, the
    transaction committed there, and the destination resumed on B by GTID (issue 42.4)."""
    a = MariaDBServer(tmp_path / "a", server_id=11)
    b = MariaDBServer(tmp_path / "b", server_id=12, extra_args=["--log-slave-updates=ON"])
    xid = "floatxa-switched-restart"
    try:
        monkeypatch.setenv(PASSWORD_ENV, _replica_of(a, b))
        layout = DestinationLake.at(tmp_path / "lake", "d")
        uri = layout.change_log
        running = Running(WriteTerm("d", _by_gtid(_config(a)), layout))
        running.wait_for(lambda: has_commits(uri))
        _prepare_xa(a, xid)
        a.execute("INSERT INTO shop.t VALUES (1)")
        running.wait_for(lambda: running.rows() >= 1)
        assert running.stop().error is None
        _, prepared = _prepared_listed(uri, xid)
        wait_for(lambda: _caught_up(b, a), "the replica to catch up")
        b.execute("STOP SLAVE")  # promoted
        # The premise: the prepared group is somewhere else in B's binlog.
        assert prepared.gtid is not None
        on_b = _gtid_event_at(b, prepared.gtid)
        assert on_b is not None
        assert on_b != (prepared.file, prepared.pos)
        b.execute("INSERT INTO shop.t VALUES (4)")
        _commit_on_b_and_resume(b, xid, uri, 1, 4)
    finally:
        b.stop()
        a.stop()


def test_a_prepared_xa_held_while_the_stream_moves_to_a_new_primary_is_listed_at_its_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The address the destination reads from switches from A to B while an XA transaction
    prepared on A is held: the stream goes on by GTID, and the checkpoints it writes on B list
    the transaction at its place in B's binlog, so a restart on B reads it from there."""
    a = MariaDBServer(tmp_path / "a", server_id=11)
    b = MariaDBServer(tmp_path / "b", server_id=12, extra_args=["--log-slave-updates=ON"])
    xid = "floatxa-switched-stream"
    try:
        monkeypatch.setenv(PASSWORD_ENV, _replica_of(a, b))
        layout = DestinationLake.at(tmp_path / "lake", "d")
        uri = layout.change_log
        with TcpProxy((a.host, a.port)) as proxy:
            config = _by_gtid(_config(a))
            source = config.source.model_copy(update={"port": proxy.port})
            running = Running(WriteTerm("d", config.model_copy(update={"source": source}), layout))
            running.wait_for(lambda: has_commits(uri))
            _prepare_xa(a, xid)
            a.execute("INSERT INTO shop.t VALUES (1)")
            running.wait_for(lambda: running.rows() >= 1)
            wait_for(lambda: _caught_up(b, a), "the replica to catch up")
            b.execute("STOP SLAVE")  # promoted
            proxy.refuse()  # the old primary goes away; the address leads to B
            proxy.target = (b.host, b.port)
            proxy.forward()
            b.execute("INSERT INTO shop.t VALUES (5)")
            running.wait_for(lambda: running.rows() >= 2)
            assert running.stop().error is None
        resume, prepared = _prepared_listed(uri, xid)
        assert resume.server == ServerIdentity(12, gtid_domain_id=0)
        assert prepared.gtid is not None
        assert (prepared.file, prepared.pos) == _gtid_event_at(b, prepared.gtid)
        _commit_on_b_and_resume(b, xid, uri, 1, 5)
    finally:
        b.stop()
        a.stop()
