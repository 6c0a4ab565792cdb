"""The binlog source's control connection: what it asks the server beside the dump.

One connection per source, opened on first use and closed with each reader: the columns,
labels and logical types a table map cannot say (information_schema, :class:`.table_maps.
Catalog`), and the binlog's DDL after an event (:mod:`.ddl_index`), kept over reconnects.
"""

from __future__ import annotations

import logging

from cdc_platform.events import ServerIdentity
from cdc_platform.source.binlog_server import BinlogServer
from cdc_platform.source.mysql import Connection
from cdc_platform.source.stream.ddl_index import DdlIndex, LaterStatement
from cdc_platform.source.stream.table_maps import JSON_VALID_CHECK, Catalog, enum_labels

__all__ = ["ControlConnection"]

log = logging.getLogger("cdc_platform.source")


class ControlConnection:
    """The control queries of one :class:`~.binlog.BinlogSource` on ``binlog_server``."""

    def __init__(self, binlog_server: BinlogServer) -> None:
        self._server = binlog_server
        self._control: Connection | None = None
        self._history = DdlIndex()

    def _connection(self) -> Connection:
        self._control = self._control or self._server.connect()
        return self._control

    def later(self, server: ServerIdentity | None, file: str, pos: int) -> list[LaterStatement]:
        """The binlog's DDL after ``file``:``pos``, kept over reconnects (:mod:`.ddl_index`)."""
        return self._history.after(self._connection(), server, file, pos)

    def catalog(self, db: str, table: str) -> Catalog:
        """What the binlog's table map cannot say about a table, from information_schema."""
        catalog = Catalog()
        with self._connection().cursor() as cur:
            cur.execute(
                "SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE FROM information_schema.COLUMNS "
                "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION",
                (db, table),
            )
            names: list[str] = []
            for name, data_type, column_type in cur.fetchall():
                names.append(str(name))
                if data_type in ("enum", "set"):
                    catalog.labels[str(name)] = enum_labels(str(column_type))
                elif data_type in ("uuid", "inet4", "inet6"):
                    catalog.logical[str(name)] = str(data_type)
            catalog.columns = tuple(names)
            cur.execute(
                "SELECT UNIX_TIMESTAMP(CREATE_TIME) FROM information_schema.TABLES "
                "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
                (db, table),
            )
            row = cur.fetchone()
            if row is not None and row[0] is not None:
                catalog.defined_at = int(row[0])
            if self._server.is_mariadb():
                cur.execute(
                    "SELECT CHECK_CLAUSE FROM information_schema.CHECK_CONSTRAINTS "
                    "WHERE CONSTRAINT_SCHEMA = %s AND TABLE_NAME = %s",
                    (db, table),
                )
                for (clause,) in cur.fetchall():
                    match = JSON_VALID_CHECK.fullmatch(str(clause).strip())
                    if match:
                        catalog.logical[match.group(1).replace("``", "`")] = "json"
        return catalog

    def close(self) -> None:
        """Close the connection (a later query opens a new one)."""
        if self._control is not None:
            try:
                self._control.close()
            except Exception:
                log.debug("closing the control connection failed", exc_info=True)
            self._control = None
