"""How the binlog source tells apart the ways a server refuses or ends a binlog dump.

Error 1236 is not always a purged binlog, and a second reader with the same server_id is a
configuration fault, not a lost connection: each case gets its own error class and message.
"""

from __future__ import annotations

import itertools
import threading
from typing import Any

import pytest

from cdc_platform.config.source import SourceConfig
from cdc_platform.errors import (
    BinlogGapError,
    BinlogReadError,
    ServerIdConflictError,
    SourceError,
)
from cdc_platform.events import ChangeEvent, ResumePosition
from cdc_platform.source import BinlogSource
from cdc_platform.testing.binlog import collect_events
from cdc_platform.testing.processes import wait_for
from tests.conftest import MariaDBDatabase

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

_SERVER_IDS = itertools.count(6700)


def _config(db: MariaDBDatabase, **overrides: Any) -> SourceConfig:
    values: dict[str, Any] = {
        "host": db.server.host,
        "port": db.server.port,
        "user": db.user.name,
        "password_env": "CDC_TEST_PASSWORD",
        "server_id": next(_SERVER_IDS),
        "include_tables": [rf"{db.name}\..*"],
        "heartbeat_seconds": 1.0,
        "connect_timeout_seconds": 5.0,
        "reconnect_initial_seconds": 0.1,
        "reconnect_max_seconds": 1.0,
    }
    values.update(overrides)
    return SourceConfig(**values)


def _source(
    db: MariaDBDatabase, config: SourceConfig, resume: ResumePosition | None
) -> BinlogSource:
    return BinlogSource(config, resume=resume, password=db.user.password)


def _dump_threads(db: MariaDBDatabase) -> list[int]:
    return [
        int(row[0])
        for row in db.server.query("SHOW PROCESSLIST")
        if str(row[4]).startswith("Binlog Dump") and row[1] == db.user.name
    ]


def test_a_second_reader_with_the_same_server_id_is_a_conflict(mariadb: MariaDBDatabase) -> None:
    """MariaDB ends the older dump with error 4052 when a reader with the same server_id
    connects: reconnecting would only kick the other reader in turn, forever."""
    config = _config(mariadb)
    start = _source(mariadb, config, None).current_position()
    first = _source(mariadb, config, start)
    outcome: list[BaseException | list[ChangeEvent]] = []

    def read_first() -> None:
        try:
            outcome.append(collect_events(first, lambda _: False, timeout=40))
        except SourceError as exc:
            outcome.append(exc)

    reader = threading.Thread(target=read_first)
    reader.start()
    wait_for(lambda: len(_dump_threads(mariadb)) == 1, "one dump thread", timeout=30)
    second = _source(mariadb, config, start)
    stream = second.events()
    timer = threading.Timer(30, second.stop)
    timer.start()
    try:
        mariadb.server.execute("CREATE TABLE t (id INT PRIMARY KEY)", database=mariadb.name)
        next(stream)  # the second reader streams
        reader.join(timeout=45)
    finally:
        timer.cancel()
        second.stop()
        stream.close()
    assert not reader.is_alive()
    (error,) = outcome
    print(f"first reader ended with: {error!r}")
    assert isinstance(error, ServerIdConflictError), error
    assert error.transient is False
    assert error.server_id == config.server_id
    message = str(error)
    assert f"another reader connected with the same server_id {config.server_id}" in message
    assert "give every destination and every replica its own server_id" in message
    assert mariadb.user.password not in message


def test_a_position_inside_an_event_is_not_reported_as_purged(mariadb: MariaDBDatabase) -> None:
    """The file exists and the offset is inside it, but not at an event start: the server
    says 'bogus data' / 'binlog truncated'. That is not a purged binlog."""
    config = _config(mariadb)
    mariadb.server.execute(
        "CREATE TABLE t (id INT PRIMARY KEY, v TEXT)",
        "INSERT INTO t VALUES (1, REPEAT('a', 500))",
        database=mariadb.name,
    )
    current = _source(mariadb, config, None).current_position()
    inside = ResumePosition(current.file, current.pos - 200, current.gtid_set)
    with pytest.raises(BinlogReadError) as caught:
        collect_events(_source(mariadb, config, inside), lambda _: True, timeout=20)
    print(f"inside an event: {caught.value!r}")
    assert not isinstance(caught.value, BinlogGapError)
    assert caught.value.transient is False
    message = str(caught.value)
    assert f"refused to send its binlog from {inside.file}:{inside.pos}" in message
    assert "not the start of an event" in message
    assert "take a new snapshot" not in message


def test_a_binlog_purged_while_reconnecting_is_a_gap(mariadb: MariaDBDatabase) -> None:
    """The dump connection dies, the binlog is purged before the source reconnects: the
    server's 1236 'could not find first log file' is a gap, with the gap's advice."""
    server = mariadb.server
    config = _config(mariadb, reconnect_initial_seconds=5.0, reconnect_max_seconds=5.0)
    server.execute("CREATE TABLE t (id INT PRIMARY KEY)", database=mariadb.name)
    start = _source(mariadb, config, None).current_position()
    server.execute("INSERT INTO t VALUES (1)", database=mariadb.name)
    source = _source(mariadb, config, start)
    stream = source.events()
    timer = threading.Timer(60, source.stop)
    timer.start()
    try:
        next(stream)  # the row: the source now reads start.file
        # End the dump first (the file it reads cannot be purged, and it must not see the
        # rotation), then rotate and purge while the source waits to reconnect. KILL is
        # asynchronous and a dying dump thread still pins its file: retry the purge.
        for thread in _dump_threads(mariadb):
            server.execute(f"KILL CONNECTION {thread}")
        wait_for(lambda: not _dump_threads(mariadb), "no dump thread", timeout=30)
        server.execute("FLUSH BINARY LOGS")
        newest = server.query("SHOW MASTER STATUS")[0][0]

        def purged() -> bool:
            server.execute(f"PURGE BINARY LOGS TO '{newest}'")
            return start.file not in {row[0] for row in server.query("SHOW BINARY LOGS")}

        wait_for(purged, "the purge before the source reconnects (in 5 s)", timeout=4.0)
        with pytest.raises(BinlogGapError) as caught:
            for _ in stream:
                pass
    finally:
        timer.cancel()
        source.stop()
        stream.close()
    print(f"purged while reconnecting: {caught.value!r}")
    assert caught.value.transient is False
    assert "Could not find first log file name" in str(caught.value)
    assert "take a new snapshot" in str(caught.value)
