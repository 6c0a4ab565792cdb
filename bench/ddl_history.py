"""What the DDL history scan costs a catch-up: a backlog with DDL every few thousand events.

    .venv/bin/python bench/ddl_history.py [--mb 64] [--ddl-every 3000] [--rows-per-txn 10]
        [--net-write-timeout S]

Starts a private MariaDB (binlog ROW/FULL/FULL) and writes a backlog of about --mb MB into
``shop.orders`` (a BINARY(16) column: the table map cannot tell it from a UUID, so decoding it
needs information_schema), with a ``CREATE TABLE shop.side_N`` every --ddl-every binlog
events, then ``ALTER TABLE orders ADD COLUMN w INT`` at the end: every old table map now
differs from today's definition, so the reader asks the binlog's history
(source/stream/ddl_history.py) whether a later statement may have changed ``u``. Then one
BinlogSource reads the whole backlog (a catch-up) and the bench prints: the catch-up's
seconds, how often the history was asked, the seconds spent in it (total, and the longest
single stall of the reader thread: the time the dump connection is not read), the binlog
events the history scanned, and the reconnects. ``--net-write-timeout S`` sets the server's
net_write_timeout (default 60 s) to show when a stall drops the dump connection.

The brief's figure is a 1 GB backlog; the default is 64 MB so that a run takes about a minute
on a shared two-core machine; the figures scale with --mb (docs/source.md lists a run).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from cdc_platform.config.source import SourceConfig
from cdc_platform.events import EventKind
from cdc_platform.source import BinlogSource
from cdc_platform.testing.mariadb import MariaDBServer

EVENTS_PER_TXN = 5
"""A MariaDB transaction of one INSERT: GTID, annotate rows, table map, write rows, XID."""

FILL = """CREATE PROCEDURE fill(txns INT, per_txn INT, ddl_every INT, pad INT)
BEGIN
  DECLARE i INT DEFAULT 0;
  DECLARE r INT;
  WHILE i < txns DO
    SET r = 0;
    START TRANSACTION;
    INSERT INTO orders (id, u, pad)
      SELECT i * per_txn + seq, UNHEX(MD5(i * per_txn + seq)), REPEAT('p', pad)
      FROM seq_1_to_1000 WHERE seq <= per_txn;
    COMMIT;
    SET i = i + 1;
    IF i % ddl_every = 0 THEN
      EXECUTE IMMEDIATE CONCAT('CREATE TABLE side_', i, ' (id INT PRIMARY KEY)');
    END IF;
  END WHILE;
END"""


class Timed:
    """Wraps the source's history question: count, seconds, longest stall."""

    def __init__(self, source: BinlogSource) -> None:
        self.asked = 0
        self.seconds = 0.0
        self.longest = 0.0
        self._inner = source._later
        source._later = self

    def __call__(self, file: str, pos: int) -> Iterable[Any]:
        began = time.perf_counter()
        statements = list(self._inner(file, pos))  # the scan happens here, in the reader thread
        spent = time.perf_counter() - began
        self.asked += 1
        self.seconds += spent
        self.longest = max(self.longest, spent)
        return statements


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mb", type=float, default=64.0)
    parser.add_argument("--ddl-every", type=int, default=3000, help="binlog events")
    parser.add_argument("--rows-per-txn", type=int, default=10)
    parser.add_argument("--pad", type=int, default=150, help="bytes per row")
    parser.add_argument("--net-write-timeout", type=int, default=0)
    args = parser.parse_args()
    per_txn_bytes = 140 + args.rows_per_txn * (args.pad + 30)
    txns = int(args.mb * 1024 * 1024 / per_txn_bytes)
    ddl_every = max(1, args.ddl_every // EVENTS_PER_TXN)

    with tempfile.TemporaryDirectory(prefix="cdc-bench-") as tmp:
        server = MariaDBServer(Path(tmp), extra_args=["--max-binlog-size=64M"])
        with server:
            user = server.create_replication_user("cdc", "cdc-secret")
            server.execute(
                "SET GLOBAL innodb_flush_log_at_trx_commit = 0",
                "SET GLOBAL sync_binlog = 0",
                "CREATE DATABASE shop",
                "CREATE TABLE shop.orders (id BIGINT PRIMARY KEY, u BINARY(16), pad TEXT)",
                f"CREATE PROCEDURE shop.{FILL.removeprefix('CREATE PROCEDURE ')}",
            )
            start = server.binlog_position()
            began = time.perf_counter()
            server.execute(
                f"CALL fill({txns}, {args.rows_per_txn}, {ddl_every}, {args.pad})", database="shop"
            )
            server.execute("ALTER TABLE orders ADD COLUMN w INT", database="shop")
            logs = server.query("SHOW BINARY LOGS")
            size = sum(int(row[1]) for row in logs if str(row[0]) >= start.file) - start.pos
            print(
                f"backlog: {size / 2**20:.1f} MB, {txns} transactions of {args.rows_per_txn} "
                f"rows ({txns * EVENTS_PER_TXN} events), a CREATE TABLE every {ddl_every} "
                f"transactions ({txns // ddl_every} DDL), written in "
                f"{time.perf_counter() - began:.1f} s"
            )
            if args.net_write_timeout:
                server.execute(f"SET GLOBAL net_write_timeout = {args.net_write_timeout}")
            config = SourceConfig(
                host=server.host, port=server.port, user=user.name, password_env="UNUSED",
                server_id=9003, include_tables=[r"shop\.orders"], decode_workers=1,
                reconnect_initial_seconds=0.1, reconnect_max_seconds=1.0,
            )  # fmt: skip
            source = BinlogSource(config, resume=start, password=user.password)
            timed = Timed(source)
            rows, last = 0, txns * args.rows_per_txn
            began = time.perf_counter()
            stream = source.events()
            try:
                for event in stream:
                    if event.kind is EventKind.ROW:
                        rows += 1
                        if rows >= last:
                            break
            except Exception:
                print(f"--- MariaDB error log ---\n{server.error_log()}")
                raise
            finally:
                source.stop()
                stream.close()
            elapsed = time.perf_counter() - began
            history = getattr(source, "_history", None)
            scanned = getattr(history, "scanned_events", "?")
            print(
                f"catch-up: {rows} rows in {elapsed:.1f} s; history asked {timed.asked} times, "
                f"{timed.seconds:.2f} s in it, longest stall {timed.longest:.2f} s; events "
                f"scanned {scanned}; reconnects {source.reconnects}"
            )


if __name__ == "__main__":
    main()
