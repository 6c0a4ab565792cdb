"""A random OLTP workload against a source database, and its ground truth.

Inserts, updates (including primary-key changes), deletes and multi-row transactions, some of
them rolled back, on tables with primary keys; used by the crash tests, the benchmarks and
the demo. Deterministic for a given seed.
"""

from __future__ import annotations

import random
import threading
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import pymysql

from cdc_platform.testing.mariadb import MariaDBServer
from cdc_platform.testing.replay import RowKey

__all__ = ["SCHEMA", "Workload", "WorkloadStats", "source_rows"]

SCHEMA: tuple[str, ...] = (
    """CREATE TABLE IF NOT EXISTS customers (
        id INT PRIMARY KEY COMMENT 'customer number',
        name VARCHAR(64) NOT NULL COMMENT 'full name',
        email VARCHAR(128) COMMENT 'contact address; NULL when unknown',
        balance DECIMAL(12, 2) NOT NULL DEFAULT 0 COMMENT 'account balance in EUR'
    ) ENGINE=InnoDB COMMENT 'shop customers'""",
    """CREATE TABLE IF NOT EXISTS orders (
        id BIGINT PRIMARY KEY COMMENT 'order number',
        customer_id INT NOT NULL COMMENT 'customers.id of the buyer',
        status VARCHAR(16) NOT NULL COMMENT 'new, paid, shipped, returned or cancelled',
        amount DECIMAL(12, 2) NOT NULL COMMENT 'order total in EUR',
        note TEXT COMMENT 'free text from the buyer'
    ) ENGINE=InnoDB COMMENT 'shop orders'""",
)
"""The demo and test schema: two tables, integer primary keys, decimals and text; every column
commented, as a real source's are (the comments become the mirrors' column descriptions)."""

_STATUSES = ("new", "paid", "shipped", "returned", "cancelled")


@dataclass
class WorkloadStats:
    """What the workload did (committed and rolled-back transactions)."""

    committed: int = 0
    rolled_back: int = 0
    statements: int = 0
    errors: int = 0
    last_error: str | None = field(default=None, repr=False)


class Workload:
    """Random transactions on `customers` and `orders` in one database, from a thread or inline."""

    def __init__(self, server: MariaDBServer, database: str, *, seed: int = 1) -> None:
        self.server = server
        self.database = database
        self.rng = random.Random(seed)
        self.stats = WorkloadStats()
        self._next_customer = 1
        self._next_order = 1
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def create_schema(self) -> None:
        """Create the tables if they do not exist."""
        self.server.execute(*SCHEMA, database=self.database)
        for table, attr in (("customers", "_next_customer"), ("orders", "_next_order")):
            top = self.server.query(f"SELECT COALESCE(MAX(id), 0) FROM {table}", self.database)
            setattr(self, attr, int(top[0][0]) + 1)

    def run_transactions(self, count: int) -> None:
        """Run ``count`` random transactions inline."""
        with self._connect() as conn:
            for _ in range(count):
                self._transaction(conn)

    def start(self, rate_per_second: float | None = None) -> None:
        """Run transactions in a background thread until :meth:`stop` (optionally paced)."""
        self._stop.clear()

        def loop() -> None:
            while not self._stop.is_set():
                try:
                    with self._connect() as conn:
                        while not self._stop.is_set():
                            self._transaction(conn)
                            if rate_per_second:
                                self._stop.wait(1.0 / rate_per_second)
                except pymysql.MySQLError as exc:  # server restarts in failure tests
                    self.stats.errors += 1
                    self.stats.last_error = str(exc)
                    self._stop.wait(0.2)

        self._thread = threading.Thread(target=loop, name="workload", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the background thread after its current transaction."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None

    def _connect(self) -> pymysql.connections.Connection[Any]:
        return self.server.connect(self.database, autocommit=False)

    def _transaction(self, conn: pymysql.connections.Connection[Any]) -> None:
        rng = self.rng
        statements = rng.choice((1, 1, 1, 2, 3, 5, 20))
        try:
            with conn.cursor() as cur:
                for _ in range(statements):
                    self._statement(cur)
                    self.stats.statements += 1
            if rng.random() < 0.1:
                conn.rollback()
                self.stats.rolled_back += 1
            else:
                conn.commit()
                self.stats.committed += 1
        except pymysql.MySQLError:
            conn.rollback()
            raise

    def _statement(self, cur: pymysql.cursors.Cursor) -> None:
        rng = self.rng
        choice = rng.random()
        if choice < 0.35 or self._next_customer < 5:
            cid = self._next_customer
            self._next_customer += 1
            cur.execute(
                "INSERT INTO customers (id, name, email, balance) VALUES (%s, %s, %s, %s)",
                (
                    cid,
                    f"customer {cid} ü",
                    f"c{cid}@example.com" if rng.random() < 0.8 else None,
                    Decimal(rng.randint(0, 10**6)) / 100,
                ),
            )
        elif choice < 0.6:
            oid = self._next_order
            self._next_order += 1
            cur.execute(
                "INSERT INTO orders (id, customer_id, status, amount, note) "
                "VALUES (%s, %s, %s, %s, %s)",
                (
                    oid,
                    rng.randrange(1, self._next_customer),
                    "new",
                    Decimal(rng.randint(1, 10**5)) / 100,
                    "x" * rng.randint(0, 300),
                ),
            )
        elif choice < 0.8:
            cur.execute(
                "UPDATE orders SET status = %s, amount = amount + 1 WHERE id = %s",
                (rng.choice(_STATUSES), rng.randrange(1, max(2, self._next_order))),
            )
        elif choice < 0.88:
            cur.execute(
                "UPDATE customers SET balance = balance + %s WHERE id BETWEEN %s AND %s",
                (
                    Decimal(rng.randint(-500, 500)) / 100,
                    lo := rng.randrange(1, self._next_customer),
                    lo + 3,
                ),
            )
        elif choice < 0.92:
            # A primary-key change: the change log must show it as an update of the old key.
            new_id = self._next_customer
            self._next_customer += 1
            cur.execute(
                "UPDATE customers SET id = %s WHERE id = %s",
                (new_id, rng.randrange(1, new_id)),
            )
        else:
            table = rng.choice(("customers", "orders"))
            top = self._next_customer if table == "customers" else self._next_order
            cur.execute(f"DELETE FROM {table} WHERE id = %s", (rng.randrange(1, max(2, top)),))


def source_rows(server: MariaDBServer, database: str, table: str) -> dict[RowKey, dict[str, Any]]:
    """The table's rows keyed like :func:`cdc_platform.testing.replay.replay`, values as the
    change log represents them (DECIMAL as text)."""
    with server.connect(database) as conn, conn.cursor(pymysql.cursors.DictCursor) as cur:
        cur.execute(f"SELECT * FROM `{table}`")
        rows = cur.fetchall()
    result: dict[RowKey, dict[str, Any]] = {}
    for row in rows:
        value = {k: (str(v) if isinstance(v, Decimal) else v) for k, v in row.items()}
        result[(("id", value["id"]),)] = value
    return result
