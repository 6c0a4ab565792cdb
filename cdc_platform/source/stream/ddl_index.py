"""The binlog's DDL ahead of the reader, scanned once and kept: the history :mod:`.ddl_history`
reads when a table map's catalog facts may be newer than the event.

The reader asks (in its own thread: it cannot decode the rows event it holds without the
answer) for the statements after a table map, up to the binlog's end: today's catalog may
reflect any of them. It asks again after every DDL, and a catch-up across a backlog with DDL
every few thousand events asked for the same backlog hundreds of times, each a
``SHOW BINLOG EVENTS`` pass to the end (issue 42.8: most of a catch-up's time, and a pass
longer than the server's ``net_write_timeout`` dropped the dump connection, whose reconnect
asked again). So the statements that may change a table (DDL: few) are kept with the range
they cover, each binlog event is scanned once, a later question only scans what was written
since (up to the end the binlog has when asked), and the kept statements survive reconnects.
Statements before the position asked are dropped; a question from further back scans just
the part before. Measured in ``bench/ddl_history.py`` (docs/source.md).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from pymysql.cursors import SSCursor

from cdc_platform.source.stream.ddl_history import LaterStatement, names_tables

__all__ = ["DUMP_WRITE_TIMEOUT", "DdlIndex", "LaterStatement"]

DUMP_WRITE_TIMEOUT = 3600
"""The dump connection's ``net_write_timeout`` (seconds; the server's default is 60): how long
the server waits for a reader that does not read, here while it scans the history once (about
20-50 s per GB of backlog measured, docs/source.md), before it drops the connection. A reader
that is gone closes its socket (the write fails at once) or reconnects with the same
server_id (the server then ends the old dump thread)."""

log = logging.getLogger("cdc_platform.source")

_Place = tuple[int, int]
"""(the binlog file's number, position): binlog places in order."""


def _place(file: str, pos: int) -> _Place:
    return int(file.rsplit(".", 1)[-1]), pos


class DdlIndex:
    """The statements that may change a table's definition, from ``covered_from`` to
    ``covered_to`` of one server's binlog. Not thread-safe: the reader thread's."""

    def __init__(self) -> None:
        self._server: object = None
        self._statements: list[LaterStatement] = []
        self._from: _Place | None = None
        self._to: tuple[str, int] = ("", 0)
        self.scanned_events = 0
        """Binlog events read by ``SHOW BINLOG EVENTS`` so far (the bench prints it)."""

    def after(self, conn: Any, server: object, file: str, pos: int) -> list[LaterStatement]:
        """The kept statements at or after ``file``:``pos`` (an event's start) up to the
        binlog's end now; ``server`` is the identity of the server read (another one has
        other files and positions: the kept statements are dropped)."""
        with conn.cursor() as cur:
            cur.execute("SHOW BINARY LOGS")
            files = [(str(row[0]), int(row[1])) for row in cur.fetchall()]
        names = [name for name, _ in files]
        if file not in names:
            return []
        here = _place(file, pos)
        if server != self._server or self._from is None or self._to[0] not in names:
            self._server, self._statements = server, []
            self._from, self._to = here, (file, pos)
        began, scanned = time.monotonic(), self.scanned_events
        if here < self._from:
            earlier, _ = self._scan(conn, files, (file, pos), self._from)
            self._statements[:0] = earlier
            self._from = here
        later, self._to = self._scan(conn, files, self._to, _place(*files[-1]))
        self._statements.extend(later)
        if here > self._from:
            self._statements = [s for s in self._statements if _place(s.file, s.pos) >= here]
            self._from = here
        spent = time.monotonic() - began
        if spent > 1.0:
            log.info(
                "read %d binlog events (SHOW BINLOG EVENTS) in %.1f s for the DDL after %s:%d",
                self.scanned_events - scanned,
                spent,
                file,
                pos,
            )
        return list(self._statements)

    def _scan(
        self, conn: Any, files: list[tuple[str, int]], start: tuple[str, int], stop: _Place
    ) -> tuple[list[LaterStatement], tuple[str, int]]:
        """The statements from ``start`` (an event's start) up to ``stop`` (or the end), and
        where the scan ended (an event's start or end)."""
        found: list[LaterStatement] = []
        names = [name for name, _ in files]
        file, at = start
        for name, size in files[names.index(start[0]) :]:
            file, at = name, (at if name == start[0] else 4)
            if at >= size and name != names[-1]:
                continue  # read to its end before: no event starts there
            with conn.cursor(SSCursor) as cur:
                cur.execute(f"SHOW BINLOG EVENTS IN %s FROM {int(at)}", (name,))
                for row in cur:
                    at = int(row[1])
                    if _place(name, at) >= stop:
                        return found, (name, at)
                    self.scanned_events += 1
                    at = int(row[4]) or at
                    if str(row[2]) == "Query" and names_tables(str(row[5])):
                        found.append(LaterStatement(name, int(row[1]), str(row[5])))
        return found, (file, at)
