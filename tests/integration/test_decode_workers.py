"""The change log is the same, row for row, with decode workers and without.

One binlog range (bulk inserts, multi-row updates and deletes, a transaction larger than the
ring buffer so it is committed in chunks, DDL, a rolled-back transaction) is captured twice
from the same starting checkpoint into two change logs: with ``decode_workers: 1`` (rows
decoded in the reader thread) and with 2 worker processes. Content, order and ``seq`` must be
equal; only commit times and batch numbers may differ.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from deltalake import DeltaTable

from cdc_platform.config.models import InstanceConfig
from cdc_platform.events import ResumePosition
from cdc_platform.runtime import DestinationRuntime
from cdc_platform.sink import DeltaChangeLog
from cdc_platform.sink.term import WriteTerm
from cdc_platform.testing.destinations import PASSWORD_ENV, instance_config
from tests.conftest import MariaDBDatabase

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

_VARYING = {"committed_at", "batch_seq"}
"""Columns that depend on when batches were cut and committed, not on what was captured."""


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


def _capture(db: MariaDBDatabase, start: ResumePosition, uri: str, workers: int) -> list[dict]:
    sink = DeltaChangeLog(uri, "d")
    sink.commit((), batch_seq=1, resume=start, epoch=0)
    sink.close()
    summary = DestinationRuntime(WriteTerm("d", _config(db, workers), uri)).run(
        exit_when_idle_seconds=3
    )
    assert summary.error is None
    rows = DeltaTable(uri).to_pyarrow_table().to_pylist()
    rows.sort(key=lambda row: int(row["seq"]))
    return [{k: v for k, v in row.items() if k not in _VARYING} for row in rows]


def test_change_log_is_the_same_with_one_and_two_decode_workers(
    mariadb: MariaDBDatabase, lake_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(PASSWORD_ENV, mariadb.user.password)
    server, db = mariadb.server, mariadb.name
    file, pos = server.query("SHOW MASTER STATUS")[0][:2]
    start = ResumePosition(str(file), int(pos))
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
    one = _capture(mariadb, start, str(lake_root / "one" / "changes"), workers=1)
    two = _capture(mariadb, start, str(lake_root / "two" / "changes"), workers=2)
    assert len(one) == 1 + 600 + 300 + 50 + 550 + 1 + 1  # CREATE, rows, ALTER, last insert
    assert [r["seq"] for r in one] == list(range(1, len(one) + 1))
    assert one == two
