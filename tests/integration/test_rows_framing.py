"""Rows events framed from the raw packets, and decoded in worker processes, give exactly the
change events of the library's events decoded in the reader thread.

The same binlog range (every column type of test_column_types, multi-row inserts, updates and
deletes, a table the filters leave out, several transactions) is read twice: once with lean
framing (:mod:`cdc_platform.source.stream.rows_framing`) and once with every event left to
mysql-replication, and with two decode worker processes (default bounds, and bounds so small
that every rows event is its own task and waits for the one before). The change events must be
equal, field for field, in the same order.
"""

from __future__ import annotations

import itertools
import uuid

import pytest

from cdc_platform.config.source import SourceConfig
from cdc_platform.events import ChangeEvent, EventKind, Op
from cdc_platform.source import BinlogSource
from cdc_platform.source.stream.decode_pool import DecodePool
from cdc_platform.testing.binlog import collect_events
from cdc_platform.testing.mariadb import MariaDBServer, ReplicationUser
from tests.integration.test_column_types import COLUMNS

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

_SERVER_IDS = itertools.count(5300)


def _read(
    config: SourceConfig,
    user: ReplicationUser,
    start: object,
    *,
    lean: bool,
    workers: int = 1,
    pool: DecodePool | None = None,
) -> list[ChangeEvent]:
    source = BinlogSource(
        config.model_copy(update={"server_id": next(_SERVER_IDS), "decode_workers": workers}),
        resume=start,
        password=user.password,
        lean_framing=lean,
        decode_pool=pool,  # None: the configured workers; else the same reader, other bounds
        # Every quiet COMMIT (a transaction with nothing captured) comes out, whatever the timing.
        clock=itertools.count(0, 10).__next__,
    )
    return collect_events(
        source,
        lambda evs: any(e.kind is EventKind.DDL and "the_end" in (e.ddl or "") for e in evs),
        timeout=60,
    )


def _fields(event: ChangeEvent) -> tuple[object, ...]:
    return (event, event.columns)


def test_lean_framing_equals_the_library_path(
    mariadb_server: MariaDBServer, replication_user: ReplicationUser
) -> None:
    if not mariadb_server.running:
        mariadb_server.start()
    db = f"t_frame_{uuid.uuid4().hex[:6]}"
    config = SourceConfig(
        host=mariadb_server.host,
        port=mariadb_server.port,
        user=replication_user.name,
        password_env="CDC_TEST_PASSWORD",
        server_id=5299,
        include_tables=[rf"{db}\.all_types", rf"{db}\.the_end"],
        heartbeat_seconds=1.0,
        reconnect_initial_seconds=0.1,
        reconnect_max_seconds=1.0,
    )
    with mariadb_server.database(db):
        start = BinlogSource(config, password=replication_user.password).current_position()
        columns = ", ".join(f"`{c.name}` {c.definition}" for c in COLUMNS)
        mariadb_server.execute(
            f"CREATE TABLE `{db}`.all_types (id INT PRIMARY KEY, {columns})",
            f"CREATE TABLE `{db}`.skipped (id INT PRIMARY KEY, v TEXT)",
        )
        names = ", ".join(f"`{c.name}`" for c in COLUMNS)
        with mariadb_server.connect(db) as conn, conn.cursor() as cur:
            cur.execute("SET SESSION sql_mode = ''")
            cur.execute("SET SESSION time_zone = '+00:00'")
            rows = ", ".join(
                f"({row + 1}, {', '.join(c.values[row] for c in COLUMNS)})" for row in range(3)
            )
            cur.execute(f"INSERT INTO all_types (id, {names}) VALUES {rows}")
            cur.execute("INSERT INTO all_types (id) VALUES (4)")
            cur.execute("INSERT INTO skipped VALUES (1, 'a'), (2, REPEAT('b', 5000))")
            many = ", ".join(f"({i}, {i % 100})" for i in range(10, 2010))
            cur.execute(f"INSERT INTO all_types (id, ti) VALUES {many}")
            conn.commit()
            cur.execute("BEGIN")
            cur.execute("UPDATE all_types SET ti = ti + 1 WHERE id <= 4")
            cur.execute("UPDATE skipped SET v = 'c'")
            cur.execute(f"UPDATE all_types SET {COLUMNS[1].name} = 7 WHERE id >= 10")
            cur.execute("DELETE FROM all_types WHERE id IN (2, 4) OR id >= 1000")
            cur.execute("COMMIT")
        mariadb_server.execute(f"CREATE TABLE `{db}`.the_end (id INT)")
        lean = _read(config, replication_user, start, lean=True)
        library = _read(config, replication_user, start, lean=False)
        parallel = _read(config, replication_user, start, lean=True, workers=2)
        # One rows event per task, and at most one in flight: every bound path is taken.
        tiny = DecodePool(2, max_in_flight_bytes=1, batch_bytes=1, inline_bytes=0)
        bounded = _read(config, replication_user, start, lean=True, workers=2, pool=tiny)
    ops = [e.op for e in lean if e.kind is EventKind.ROW]
    assert ops.count(Op.INSERT) == 2004
    assert ops.count(Op.UPDATE) == 2 + 2000  # rows 3 (TINYINT at its max) and 4 (NULL) stay
    assert ops.count(Op.DELETE) == 2 + 1010
    assert len(lean) == len(library)
    for ours, theirs, workers, small in zip(lean, library, parallel, bounded, strict=True):
        assert _fields(ours) == _fields(theirs)
        assert _fields(workers) == _fields(theirs)
        assert _fields(small) == _fields(theirs)
