"""The change log is the same, row for row, with decode workers and without.

One binlog range (bulk inserts, multi-row updates and deletes, a transaction larger than the
ring buffer so it is committed in chunks, DDL, a rolled-back transaction) is captured twice
from the same starting checkpoint into two change logs: with ``decode_workers: 1`` (rows
decoded in the reader thread) and with 2 worker processes. Content, order and ``seq`` must be
equal; only commit times and batch numbers may differ. A second range interleaves single-row
events (decoded in the reader thread even with workers) with multi-row events (sent to the
workers) of two tables within transactions, so the small events wait in line behind batches
still being decoded.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from deltalake import DeltaTable

from cdc_platform.config.instance import InstanceConfig
from cdc_platform.events import ResumePosition
from cdc_platform.runtime import DestinationRuntime
from cdc_platform.sink import DeltaChangeLog
from cdc_platform.sink.destination_lake import DestinationLake
from cdc_platform.sink.term import WriteTerm
from cdc_platform.source.stream.decode_pool import DEFAULT_INLINE_BYTES
from cdc_platform.testing.destinations import PASSWORD_ENV, instance_config
from cdc_platform.testing.mariadb import MariaDBServer
from tests.conftest import MariaDBDatabase

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

_VARYING = {"committed_at", "batch_seq", "resume_position"}
"""Columns that depend on when batches were cut and committed, not on what was captured (the
resume position is on the last row of each commit)."""


def _config(db: MariaDBDatabase, workers: int) -> InstanceConfig:
    base = instance_config(
        db.server,
        db.user.name,
        [rf"{db.name}\..*"],
        server_id=2600 + workers,
        buffer_size=64,
        batch_mode="ITEMSIZE",
        batch_size=16,
    )
    source = base.source.model_copy(update={"decode_workers": workers})
    return base.model_copy(update={"source": source})


def _capture(
    db: MariaDBDatabase, start: ResumePosition, layout: DestinationLake, workers: int
) -> list[dict]:
    uri = layout.change_log
    sink = DeltaChangeLog(uri, "d")
    sink.commit((), batch_seq=1, resume=start, epoch=0)
    sink.close()
    summary = DestinationRuntime(WriteTerm("d", _config(db, workers), layout)).run(
        exit_when_idle_seconds=3
    )
    assert summary.error is None
    rows = DeltaTable(uri).to_pyarrow_table().to_pylist()
    rows.sort(key=lambda row: int(row["seq"]))
    return [{k: v for k, v in row.items() if k not in _VARYING} for row in rows]


def _begin(
    mariadb: MariaDBDatabase, monkeypatch: pytest.MonkeyPatch
) -> tuple[MariaDBServer, str, ResumePosition]:
    """The server, the database and the binlog position a test's workload starts from."""
    monkeypatch.setenv(PASSWORD_ENV, mariadb.user.password)
    return mariadb.server, mariadb.name, mariadb.server.binlog_position()


def test_change_log_is_the_same_with_one_and_two_decode_workers(
    mariadb: MariaDBDatabase, lake_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server, db, start = _begin(mariadb, monkeypatch)
    server.execute(
        "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(40), d DECIMAL(10,2), j JSON)",
        database=db,
    )
    with server.connect(db, autocommit=False) as conn, conn.cursor() as cur:
        for base in range(0, 600, 200):
            values = ", ".join(
                f"({i}, 'v{i}', {i}.25, '{{\"k\": {i}}}')" for i in range(base, base + 200)
            )
            cur.execute(f"INSERT INTO t VALUES {values}")
            conn.commit()
        cur.execute("UPDATE t SET v = CONCAT(v, '!'), d = d + 1 WHERE id < 300")
        cur.execute("DELETE FROM t WHERE id >= 550")
        conn.commit()
        cur.execute("INSERT INTO t VALUES (9999, 'never', 0, NULL)")
        conn.rollback()
        cur.execute("UPDATE t SET j = JSON_OBJECT('all', id)")  # larger than the buffer
        conn.commit()
    server.execute("ALTER TABLE t ADD COLUMN w INT", "INSERT INTO t VALUES (-1, 'x', 1, NULL, 7)",
                   database=db)  # fmt: skip
    one = _capture(mariadb, start, DestinationLake.at(lake_root, "one"), workers=1)
    two = _capture(mariadb, start, DestinationLake.at(lake_root, "two"), workers=2)
    assert len(one) == 1 + 600 + 300 + 50 + 550 + 1 + 1  # CREATE, rows, ALTER, last insert
    assert [r["seq"] for r in one] == list(range(1, len(one) + 1))
    assert one == two


def test_small_events_decoded_in_the_reader_keep_their_place_among_the_workers(
    mariadb: MariaDBDatabase, lake_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server, db, start = _begin(mariadb, monkeypatch)
    server.execute(
        "CREATE TABLE a (id INT PRIMARY KEY, v VARCHAR(40), n INT)",
        "CREATE TABLE b (id INT PRIMARY KEY, s VARCHAR(60), d DECIMAL(10,2))",
        database=db,
    )
    pad = "x" * 30  # 100 rows of either table: one event above the inline threshold
    assert 100 * len(pad) > DEFAULT_INLINE_BYTES > len(pad) + 20  # one row: below it

    cols = {"a": "v, n", "b": "s, d"}

    def many(table: str, first: int) -> str:
        return f"INSERT INTO {table} (id, {cols[table]}) VALUES " + ", ".join(
            f"({i}, '{pad}{i}', {i})" for i in range(first, first + 100)
        )

    with server.connect(db, autocommit=False) as conn, conn.cursor() as cur:
        for round_ in range(6):
            base = round_ * 1000
            cur.execute(many("a", base))  # to a worker
            cur.execute(f"INSERT INTO b VALUES ({base}, 'one', 1)")  # in the reader, behind it
            cur.execute(f"INSERT INTO a (id, v, n) VALUES ({base + 500}, 'one', 2)")
            cur.execute(many("b", base + 1))
            cur.execute(f"UPDATE a SET n = n + 1 WHERE id = {base}")
            cur.execute(f"UPDATE b SET s = CONCAT(s, '!') WHERE id BETWEEN {base} AND {base + 60}")
            cur.execute(f"DELETE FROM a WHERE id = {base + 1}")
            conn.commit()
            cur.execute(f"INSERT INTO b VALUES ({base + 900}, 'alone', 3)")  # a small txn
            conn.commit()
            if round_ == 2:  # a new table map (and decoder) for a, between batches in flight
                cur.execute("ALTER TABLE a ADD COLUMN w VARCHAR(10) DEFAULT 'w'")
    server.execute("INSERT INTO a VALUES (-1, 'end', 0, 'z')", database=db)
    one = _capture(mariadb, start, DestinationLake.at(lake_root, "one"), workers=1)
    two = _capture(mariadb, start, DestinationLake.at(lake_root, "two"), workers=2)
    per_round = 100 + 1 + 1 + 100 + 1 + 61 + 1 + 1
    assert len(one) == 2 + 6 * per_round + 1 + 1  # CREATEs, rounds, ALTER, last insert
    assert [r["seq"] for r in one] == list(range(1, len(one) + 1))
    assert one == two
