"""Every writer of a destination's change log checks the destination's filters on the table a
``db.table`` name means on the server (``source/table_names.py``), database names holding a
dot included: the request inbox, the lease holder serving it, ``cdc-platform snapshot
--table``."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterator
from pathlib import Path

import pytest

from cdc_platform.backfill.request_inbox import snapshot_inbox
from cdc_platform.backfill.snapshot import SnapshotRunner
from cdc_platform.cli import main
from cdc_platform.config import load_config
from cdc_platform.errors import SnapshotError
from cdc_platform.runtime.supervised import supervised_destination
from cdc_platform.sink.destination_lake import DestinationLake
from cdc_platform.sink.term import WriteTerm
from cdc_platform.testing.destinations import (
    PASSWORD_ENV,
    instance_config,
    sqlite_lease,
    write_conf,
)
from cdc_platform.testing.mariadb import MariaDBServer
from cdc_platform.testing.replay import has_commits, replay
from cdc_platform.testing.workload import source_rows
from tests.conftest import MariaDBDatabase

pytestmark = pytest.mark.integration


@contextlib.contextmanager
def other_database(server: MariaDBServer, name: str) -> Iterator[str]:
    """A second database (its name unique server-wide: it derives from the test's)."""
    server.execute(f"DROP DATABASE IF EXISTS `{name}`", f"CREATE DATABASE `{name}`")
    try:
        yield name
    finally:
        server.execute(f"DROP DATABASE IF EXISTS `{name}`")


def _conf(mariadb: MariaDBDatabase, lake_root: Path, tmp_path: Path, server_id: int) -> Path:
    conf = tmp_path / "conf"
    write_conf(
        conf, destination="d", server=mariadb.server, user=mariadb.user, database=mariadb.name,
        lake_root=lake_root, server_id=server_id,
        extra_platform=sqlite_lease(tmp_path),
    )  # fmt: skip
    return conf


def test_snapshot_table_refuses_a_table_outside_the_filters(
    mariadb: MariaDBDatabase, lake_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`cdc-platform snapshot --table` of a table the filters do not capture (`<db>_x.t`:
    the destination captures `<db>\\..*`) writes nothing and says why."""
    monkeypatch.setenv(PASSWORD_ENV, mariadb.user.password)
    db = mariadb.name
    conf = _conf(mariadb, lake_root, tmp_path, 2601)
    with other_database(mariadb.server, f"{db}_x") as outside:
        mariadb.server.execute(
            "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(10))",
            "INSERT INTO t VALUES (1, 'secret'), (2, 'secret')",
            database=outside,
        )
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(
                ["snapshot", "--conf", str(conf), "--destination", "d", "--table", f"{outside}.t"]
            )
    assert code == 2, out.getvalue() + err.getvalue()
    assert "not captured by the destination's filters" in err.getvalue()
    uri = str(lake_root / "d" / "changes")
    assert not has_commits(uri) or f"{outside}.t" not in replay(uri).tables
    assert not DestinationLake.at(lake_root, "d").snapshot_state.exists()


def test_a_snapshot_runner_resolves_then_checks_the_filters(
    mariadb: MariaDBDatabase, lake_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`<db>.x` + `t` exists, `<db>` + `x.t` does not: the runner copies the dotted
    database's table, whose name the destination's exclude filter does not name; a table
    excluded by name is refused before anything is written."""
    monkeypatch.setenv(PASSWORD_ENV, mariadb.user.password)
    db = mariadb.name
    config = instance_config(mariadb.server, mariadb.user.name, [rf"{db}.*"], server_id=2602)
    source = config.source.model_copy(update={"exclude_tables": [rf"{db}\.x\.hidden"]})
    config = config.model_copy(update={"source": source})
    layout = DestinationLake.at(lake_root, "d")
    uri = layout.change_log
    with other_database(mariadb.server, f"{db}.x") as dotted:
        mariadb.server.execute(
            "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(10))",
            "CREATE TABLE hidden (id INT PRIMARY KEY)",
            "INSERT INTO t VALUES (1, 'a'), (2, 'b')",
            "INSERT INTO hidden VALUES (1)",
            database=dotted,
        )
        term = WriteTerm("d", config, layout)
        with pytest.raises(SnapshotError, match="not captured by the destination's filters"):
            SnapshotRunner(
                term, DestinationLake.at(lake_root, "d").snapshot_state, tables=[f"{dotted}.hidden"]
            ).run()
        assert not has_commits(uri)
        result = SnapshotRunner(
            term, DestinationLake.at(lake_root, "d").snapshot_state, tables=[f"{dotted}.t"]
        ).run()
        assert result.per_table == {f"{dotted}.t": 2}
        rows = replay(uri)
        assert rows.tables[f"{dotted}.t"] == source_rows(mariadb.server, dotted, "t")
        assert f"{dotted}.hidden" not in rows.tables


def test_a_request_for_a_dotted_database_is_served(
    mariadb: MariaDBDatabase, lake_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Database `mysql.<test db>` is not the system schema `mysql`: the request for its table
    `t` is accepted (it was refused: the inbox split at the first dot), the lease holder
    copies it, and the stream goes on capturing it."""
    monkeypatch.setenv(PASSWORD_ENV, mariadb.user.password)
    db = mariadb.name
    dotted = f"mysql.{db}"
    conf = tmp_path / "conf"
    write_conf(
        conf, destination="d", server=mariadb.server, user=mariadb.user,
        database=rf"mysql\.{db}", lake_root=lake_root, server_id=2603,
        extra_platform=sqlite_lease(tmp_path),
    )  # fmt: skip
    loaded = load_config(conf)
    assert not loaded.errors, loaded.errors
    source = loaded.destinations["d"].config.source
    with other_database(mariadb.server, dotted):
        mariadb.server.execute(
            "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(10))",
            "INSERT INTO t VALUES (1, 'a'), (2, 'b'), (3, 'c')",
            database=dotted,
        )
        inbox = snapshot_inbox(DestinationLake.at(lake_root, "d"), source)
        request_id = inbox.submit([f"{dotted}.t"])
        with pytest.raises(SnapshotError, match="not captured"):
            inbox.submit(["mysql.user"])
        with supervised_destination(loaded, loaded.destinations["d"]) as supervisor:
            summary = supervisor.run(exit_when_idle_seconds=10.0)
        assert summary.error is None, summary
        answer = inbox.result(request_id)
        assert answer is not None
        assert answer.error is None, answer.error
        assert answer.rows == {f"{dotted}.t": 3}
        replayed = replay(str(lake_root / "d" / "changes"))
        assert replayed.duplicates == []
        assert replayed.tables[f"{dotted}.t"] == source_rows(mariadb.server, dotted, "t")
