"""Administrative statements in the binlog beside a captured table: the stream never stops for
them, reads none of them as DDL of a captured table, and says once what it passed over.

A production binlog carries much more than the DML and DDL of the captured tables: account
changes, FLUSH, triggers, routines, events, views, ANALYZE and OPTIMIZE, statements wrapped in
executable comments (mysqldump's ``/*!50001 ... */``). Each one here runs between two inserts
into the captured table ``t``; the rows after it must arrive decoded, and no DDL event may name
``t`` unless the statement really changed its columns.
"""

from __future__ import annotations

import itertools
import json
import logging
from typing import Any

import pytest

from cdc_platform.config.source import SourceConfig
from cdc_platform.events import ChangeEvent, EventKind
from cdc_platform.source import BinlogSource
from cdc_platform.testing.binlog import collect_events
from cdc_platform.testing.server_names import unique_name

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

_SERVER_IDS = itertools.count(6900)


def _statements(db: str) -> list[str]:
    """Statements that change no captured table, as a DBA or a tool writes them."""
    user, role = unique_name("adm_u"), unique_name("adm_r")
    account = f"'{user}'@'localhost'"
    return [
        f"CREATE USER {account} IDENTIFIED BY 'a-secret-1'",
        f"ALTER USER {account} IDENTIFIED BY 'a-secret-2'",
        f"SET PASSWORD FOR {account} = PASSWORD('a-secret-3')",
        f"GRANT SELECT, INSERT ON `{db}`.* TO {account}",
        f"GRANT SELECT (id) ON `{db}`.t TO {account}",
        f"REVOKE SELECT (id) ON `{db}`.t FROM {account}",
        f"CREATE ROLE {role}",
        f"GRANT {role} TO {account}",
        f"DROP ROLE {role}",
        f"RENAME USER {account} TO '{user}x'@'localhost'",
        f"DROP USER '{user}x'@'localhost'",
        "FLUSH PRIVILEGES",
        "FLUSH TABLES",
        f"FLUSH TABLES `{db}`.t",
        "CREATE TRIGGER t_bi BEFORE INSERT ON t FOR EACH ROW SET NEW.a = NEW.a + 0",
        "DROP TRIGGER t_bi",
        "CREATE PROCEDURE p_count() SELECT COUNT(*) FROM t",
        "ALTER PROCEDURE p_count COMMENT 'counts t'",
        "DROP PROCEDURE p_count",
        "CREATE FUNCTION f_twice(x INT) RETURNS INT DETERMINISTIC RETURN x * 2",
        "DROP FUNCTION f_twice",
        "CREATE EVENT e_tick ON SCHEDULE EVERY 1 DAY DISABLE DO DELETE FROM t WHERE id < 0",
        "ALTER EVENT e_tick COMMENT 'never runs'",
        "DROP EVENT e_tick",
        "CREATE VIEW v_t AS SELECT id, a FROM t",
        "CREATE OR REPLACE VIEW v_t AS SELECT id FROM t",
        "ALTER VIEW v_t AS SELECT id, a FROM t",
        "/*!50001 DROP VIEW IF EXISTS `v_t` */",
        "/*!50001 CREATE ALGORITHM=UNDEFINED VIEW `v_dump` AS SELECT `id` FROM `t` */",
        "DROP VIEW v_dump",
        "ANALYZE TABLE t",
        "OPTIMIZE TABLE t",
        "ANALYZE TABLE t PERSISTENT FOR ALL",
        f"CREATE DATABASE `{db}_side`",
        f"ALTER DATABASE `{db}_side` CHARACTER SET utf8mb4",
        f"CREATE TABLE `{db}_side`.other (id INT PRIMARY KEY)",
        f"TRUNCATE TABLE `{db}_side`.other",
        f"DROP DATABASE `{db}_side`",
        "/*!40000 ALTER TABLE `t` DISABLE KEYS */",
        "/*!40000 ALTER TABLE `t` ENABLE KEYS */",
    ]


def _config(mariadb: Any, include: str) -> SourceConfig:
    return SourceConfig(
        host=mariadb.server.host,
        port=mariadb.server.port,
        user=mariadb.user.name,
        password_env="CDC_TEST_PASSWORD",
        server_id=next(_SERVER_IDS),
        include_tables=[include.format(db=mariadb.name)],
        heartbeat_seconds=1.0,
        connect_timeout_seconds=5.0,
        reconnect_initial_seconds=0.1,
        reconnect_max_seconds=1.0,
    )


@pytest.mark.parametrize("include", [r"{db}\.t", r"{db}\..*"], ids=["one-table", "database"])
def test_administrative_statements_never_stop_the_stream_nor_read_as_ddl(
    mariadb: Any, caplog: pytest.LogCaptureFixture, include: str
) -> None:
    """With the whole database captured too: a view or a routine is no table of it."""
    db = mariadb.name
    mariadb.server.execute("CREATE TABLE t (id INT PRIMARY KEY, a INT)", database=db)
    config = _config(mariadb, include)
    start = BinlogSource(config, resume=None, password=mariadb.user.password).current_position()
    statements = _statements(db)
    sql: list[str] = []
    for n, statement in enumerate(statements, start=1):
        sql += [statement, f"INSERT INTO t VALUES ({n}, {n * 10})"]
    mariadb.server.execute(*sql, database=db)

    source = BinlogSource(config, resume=start, password=mariadb.user.password)
    with caplog.at_level(logging.INFO, logger="cdc_platform.source"):
        events = collect_events(
            source,
            lambda seen: sum(e.kind is EventKind.ROW for e in seen) >= len(statements),
            timeout=120,
        )

    rows = [e for e in events if e.kind is EventKind.ROW]
    assert [json.loads(e.after or "{}") for e in rows] == [
        {"id": n, "a": n * 10} for n in range(1, len(statements) + 1)
    ]
    ddl: list[ChangeEvent] = [e for e in events if e.kind is EventKind.DDL]
    # Only the two executable comments mysqldump writes around its INSERTs name t; the server
    # runs them (InnoDB ignores DISABLE KEYS), so they are read as what they are: ALTER TABLE t.
    assert [e.ddl for e in ddl] == statements[-2:]

    said = [r.getMessage() for r in caplog.records]
    passed_over = [m for m in said if "changes no captured table" in m]
    assert len(passed_over) == len(statements) - 2, passed_over
    assert passed_over[0].startswith("passed over CREATE USER at "), passed_over[0]
    assert not [m for m in said if "a-secret" in m], (
        "a statement's text (with a password) reached the log"
    )
