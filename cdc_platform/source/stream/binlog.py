"""The binlog source: MySQL/MariaDB row changes as a stream of ChangeEvents.

With :mod:`.dump_connection`, :mod:`.transactions`, :mod:`.table_maps`, :mod:`.rows_framing`
and :mod:`.decode_pool`, the only modules that import pymysqlreplication. The library frames
the replication stream and parses table maps, except for the rows events of known tables,
framed from the raw packets by :mod:`.rows_framing` (and decoded in worker processes by
:mod:`.decode_pool` when ``decode_workers`` is not 1, all but the small ones); everything with
a correctness consequence is decided by these:

- transaction boundaries (MariaDB's GTID event instead of BEGIN, XidEvent or a ``COMMIT``
  query at the end, DDL on its own) and the resume positions that follow from them
  (:mod:`.transactions`);
- row values, decoded from the rows-event bytes by :mod:`cdc_platform.source.values` because
  the library's decoding loses data (docs/types.md), with the table maps of :mod:`.table_maps`;
- reconnection: the library silently reconnects from the end of the last event it read,
  which may be in the middle of a transaction and, with GTIDs, from the original start GTID.
  The source refuses that reconnect (:mod:`.dump_connection`) and restarts the reader itself
  from the last transaction boundary it fully emitted, skipping the events of a half-emitted
  transaction; a server switched behind the address is checked (:mod:`.server_switch`);
- a purged binlog or GTID gap at start fails loudly (BinlogGapError) instead of skipping.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Generator, Iterator
from concurrent.futures.process import BrokenProcessPool
from dataclasses import replace
from typing import TypeVar

from pydantic import SecretStr
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.event import XAPrepareEvent, XidEvent

from cdc_platform.config.source import SourceConfig
from cdc_platform.config.start import StartConfig
from cdc_platform.errors import SourceError
from cdc_platform.events import ChangeEvent, PreparedXa, ResumePosition, ServerIdentity
from cdc_platform.source.binlog_server import BinlogServer, SourceInfo
from cdc_platform.source.filters import TableFilter, filter_fingerprint
from cdc_platform.source.mysql_errors import GAP_ADVICE, STREAM_ERRORS, StreamLostError
from cdc_platform.source.stream.boundaries import AssemblySettings
from cdc_platform.source.stream.control_connection import ControlConnection
from cdc_platform.source.stream.ddl_index import LaterStatement
from cdc_platform.source.stream.decode_pool import DecodePool, StreamHooks, ordered_events
from cdc_platform.source.stream.dump_connection import DumpConnection
from cdc_platform.source.stream.retention import RetentionHeadroom
from cdc_platform.source.stream.server_switch import check_same_server
from cdc_platform.source.stream.start_position import resolve_start
from cdc_platform.source.stream.table_maps import TablePlans
from cdc_platform.source.stream.transactions import TransactionAssembler
from cdc_platform.source.stream.xa import XaAge, warn_aging
from cdc_platform.source.stream.xa_failover import prepared_here, relocate_held
from cdc_platform.source.stream.xa_rows import XaBudget, XaRows

__all__ = ["BinlogSource", "SourceInfo"]

_READING_PREPARED = "reading a prepared XA transaction from"

log = logging.getLogger("cdc_platform.source")

_R = TypeVar("_R")


class BinlogSource:
    """Reads one server's binlog as ChangeEvents, from a resume position or the current end.

    ``events()`` is a blocking generator meant for one reader thread; ``stop()`` may be
    called from any thread and ends it promptly. ``reconnects`` counts the times the stream
    was lost and re-established from the last fully emitted transaction boundary. ``server``
    is the identity of the server the events come from, set before the first event of each
    connection and named in each transaction read on it (``Transaction.server``, so that a
    checkpoint names it): a file/position resume on another server is refused
    (SourceServerChangedError), a GTID resume continues there. ``decode_pool``: the worker
    pool to decode rows events in (None: one of ``decode_workers`` processes, or none for 1);
    the source closes it when it ends.
    """

    def __init__(  # noqa: PLR0913 (the config, then keyword-only options)
        self,
        config: SourceConfig,
        *,
        resume: ResumePosition | None = None,
        password: str | SecretStr | None = None,
        clock: Callable[[], float] = time.monotonic,
        heartbeats: bool = False,
        lean_framing: bool = True,
        decode_pool: DecodePool | None = None,
    ) -> None:
        self.config = config
        self.resume = resume
        self.reconnects = 0
        self.binlog_server = BinlogServer(config, password)
        """The server's questions and the MySQL boundary every connection goes through."""
        self._tables = TableFilter(config.include_tables, config.exclude_tables)
        self._stop = threading.Event()
        self._dump = DumpConnection(
            config, self.binlog_server, self._stop, lean_framing=lean_framing
        )
        """The reader's connection: its socket, the refused library reconnect, its dump thread."""
        self._control = ControlConnection(self.binlog_server)
        """Information_schema and the binlog's later DDL, beside the dump."""
        self._delay = config.reconnect_initial_seconds
        self.server: ServerIdentity | None = None
        self._xa_budget = XaBudget(config.xa_memory_bytes)
        self._assembly = AssemblySettings(
            self._tables,
            clock,
            filters=filter_fingerprint(config.include_tables, config.exclude_tables),
            heartbeats=heartbeats,
            xa_budget=self._xa_budget,
        )
        """What the stream's transaction assembler assembles by."""
        self._assembling: TransactionAssembler | None = None
        self._xa_age = XaAge(self.binlog_server.retention_seconds, self._where)
        self._headroom = RetentionHeadroom(self.binlog_server.retention_seconds, self._where)
        workers = config.decode_processes()
        if decode_pool is None and workers > 1:
            decode_pool = DecodePool(workers)
        self._pool = decode_pool
        """Rows events decoded in worker processes (lean framing only), or in this thread."""
        if not lean_framing:
            self._pool = None
        """Frame the rows events of known tables from the raw packets (:mod:`.rows_framing`);
        False leaves every event to the library (the reference the lean path is tested on)."""

    @property
    def decode_pool(self) -> DecodePool | None:
        """The worker processes this source decodes rows events in (None: in its thread)."""
        return self._pool

    # -- the server ----------------------------------------------------------------------------

    def _where(self) -> str:
        return self.binlog_server.where()

    def _mariadb(self) -> bool:
        return self.binlog_server.is_mariadb()

    def check(self) -> SourceInfo:
        """Verify binlog settings and grants; SourceSettingsError lists every problem and fix."""
        return self.binlog_server.check()

    def current_position(self) -> ResumePosition:
        """The server's current binlog end, as a position to start reading from."""
        return self.binlog_server.current_position()

    def start_position(self, start: StartConfig) -> ResumePosition:
        """Where a destination without a checkpoint begins: ``start`` resolved on the server."""
        return resolve_start(self.binlog_server, start)

    def _same_server(
        self, position: ResumePosition, recorded: ServerIdentity | None
    ) -> ServerIdentity:
        """Check that ``position`` may be read on the server now behind the address
        (:func:`.server_switch.check_same_server`), and take that server's identity."""
        found = self.binlog_server.identity()
        check_same_server(
            position,
            recorded,
            found,
            by_gtid=self._use_gtid(position),
            where=self._where(),
        )
        if recorded is None and self.server is None:
            log.info(
                "%s has no server identity; recording %s from the next commit", position, found
            )
        self.server = found
        return found

    def _prepare(self, start: ResumePosition) -> ResumePosition:
        """Refuse a start position whose binlog is gone or that another server recorded;
        fill in the GTID state if missing."""
        self._same_server(start, start.server)
        return self.binlog_server.check_start(start, by_gtid=self._use_gtid(start))

    def _use_gtid(self, start: ResumePosition) -> bool:
        return self.config.resume_by == "gtid" and start.gtid_set is not None and self._mariadb()

    def events(self) -> Generator[ChangeEvent, None, None]:
        """Blocking generator of change events, from the resume position or the current end.

        Ends when :meth:`stop` is called. Server loss is retried forever with exponential
        backoff (each attempt logged); a purged position or bad settings raise SourceError.
        """
        for events in self.event_lists():
            yield from events

    def event_lists(self) -> Generator[list[ChangeEvent], None, None]:
        """:meth:`events` in the non-empty lists the binlog's events produce (mostly a whole
        transaction each), so a consumer can store them with one call. Decode workers start
        at the first rows event sent to them (never, for a stream of small events)."""
        try:
            yield from self._events()
        finally:
            if self._pool is not None:
                self._pool.close()

    def _events(self) -> Generator[list[ChangeEvent], None, None]:
        start = self._until_reachable(lambda: self._prepare(self.resume or self.current_position()))
        if start is None:
            return
        if self.config.resume_by == "gtid" and not self._use_gtid(start):
            log.warning("no GTID state to resume from; resuming by file/position from %s", start)
        plans = TablePlans(
            self._tables, self._control.catalog, is_mariadb=self._mariadb(), later=self._later
        )
        assembler = self._assembler(start, plans)
        self._delay = self.config.reconnect_initial_seconds
        position = start
        while not self._stop.is_set():
            # The address may lead to another server now (a switched primary).
            if self.reconnects and not self._recheck_server(position, assembler):
                return
            assembler.server = self.server  # named in each transaction of this connection
            reader = self._reader(position, plans)
            plans.attach(reader)
            lost = False
            try:
                yield from self._stream(reader, assembler)
                return
            except STREAM_ERRORS as exc:
                if self._stop.is_set():
                    return
                lost = True
                position = self._lost(exc, assembler, position)
                if self._stop.wait(self._delay):
                    return
                self._delay = min(self._delay * 2, self.config.reconnect_max_seconds)
            except SourceError:
                raise
            except Exception as exc:
                if self._stop.is_set():
                    return
                raise self._unexpected(exc, position) from exc
            finally:
                # Ending (stop, consumer gone, error): end the server's dump thread too.
                self._close(reader, end_dump_thread=not lost)

    def _recheck_server(self, position: ResumePosition, assembler: TransactionAssembler) -> bool:
        """After a reconnect: another server behind the address is refused (file/position) or
        followed by GTID, with the held XA transactions' places in its binlog
        (:func:`.xa_failover.relocate_held`); False once stopped."""
        before = self.server

        def check() -> bool:
            found = self._same_server(position, self.server)
            return relocate_held(self.binlog_server, assembler, before, found)

        return self._until_reachable(check) is not None

    def _unexpected(self, exc: Exception, position: ResumePosition) -> SourceError:
        """The error ending the stream for a failure that is not the server's going away."""
        where = f"the binlog of {self._where()} after {position}"
        if isinstance(exc, BrokenProcessPool):
            return SourceError(
                f"a decode worker process ended abruptly (killed, or out of memory) while "
                f"reading {where}: {exc!r}; the next run starts new workers and resumes after "
                "the last committed batch (decode_workers: 1 decodes in the reader thread)"
            )
        return SourceError(f"cannot read {where}: {exc!r}")

    def _assembler(self, start: ResumePosition, plans: TablePlans) -> TransactionAssembler:
        """The assembler for a stream from ``start``, holding the rows of the XA transactions
        prepared before it (read again from their prepared groups; found by GTID when the
        checkpoint was taken on another server, :mod:`.xa_failover`)."""
        start = prepared_here(self.binlog_server, start, self.server)
        assembler = TransactionAssembler(start, plans, self._assembly)
        if start.xa_prepared:
            logs = [str(row[0]) for row in self.binlog_server.query("SHOW BINARY LOGS")]
            warn_aging(start.xa_prepared, logs, self._where())
        for xa in start.xa_prepared:
            assembler.adopt_prepared(xa, *self._read_prepared(xa))
        self._assembling = assembler
        return assembler

    @property
    def xa_memory_bytes(self) -> int:
        """What the held rows of prepared XA transactions keep in memory now (the rest is
        spilled, :mod:`.xa_rows`)."""
        return self._xa_budget.in_memory

    def oldest_prepared_xa_age(self) -> float | None:
        """Seconds since the longest-prepared XA transaction this stream holds was prepared,
        None when none is held; warns as it ages toward the binlog retention
        (:class:`.xa.XaAge`)."""
        assembler = self._assembling
        return self._xa_age.age(assembler.oldest_prepared() if assembler else None, time.time())

    def binlog_retention_headroom(self, committed_source_time: float | None) -> float | None:
        """Seconds before the binlog of ``committed_source_time`` may be purged at the latest
        (:class:`.retention.RetentionHeadroom`, which also warns)."""
        return self._headroom.headroom(committed_source_time, time.time())

    def _until_reachable(self, step: Callable[[], _R]) -> _R | None:
        """``step`` (queries before a binlog read), retried with the reconnect backoff while
        the server cannot be reached; None once :meth:`stop` was called."""
        while True:
            try:
                return step()
            except SourceError as exc:
                if not exc.transient or self._stop.is_set():
                    raise
                log.warning("%s; retrying in %.1fs", exc, self._delay)
                if self._stop.wait(self._delay):
                    return None
                self._delay = min(self._delay * 2, self.config.reconnect_max_seconds)

    def _stream(
        self, reader: BinLogStreamReader, assembler: TransactionAssembler
    ) -> Iterator[list[ChangeEvent]]:
        """Event lists of one reader until stop() (returns) or the connection is lost
        (raises)."""
        if self._pool is not None:
            hooks = StreamHooks(
                reader.fetchone, self._stop, self._reset_delay, self._dump.more_waiting
            )
            yield from ordered_events(hooks, assembler, self._pool)
            return
        fetch = reader.fetchone
        feed = assembler.feed
        stop = self._stop
        while not stop.is_set():
            event = fetch()
            if event is None:
                raise StreamLostError("the server ended the binlog stream")
            self._delay = self.config.reconnect_initial_seconds
            out = feed(event)
            if out:
                yield out

    def _reset_delay(self) -> None:
        self._delay = self.config.reconnect_initial_seconds

    def _read_prepared(self, xa: PreparedXa) -> tuple[XaRows, int]:
        """The rows of an XA transaction prepared before the resume position and committed
        after it: its group is read again from its start, up to its XA PREPARE."""
        start = ResumePosition(xa.file, xa.pos)
        plans = TablePlans(
            self._tables, self._control.catalog, is_mariadb=self._mariadb(), later=self._later
        )
        # No idle COMMITs: the group is read for its rows only.
        assembler = TransactionAssembler(start, plans, replace(self._assembly, heartbeats=False))
        try:
            reader = self._reader(start, plans)
        except STREAM_ERRORS as exc:
            raise self.binlog_server.mysql.error(
                exc, "reading a prepared XA transaction from", start
            ) from None
        plans.attach(reader)
        try:
            while not self._stop.is_set():
                event = reader.fetchone()
                if event is None:
                    break
                assembler.feed(event)
                held = assembler.prepared_rows(xa.xid)
                if held is not None:
                    return held
                if isinstance(event, (XidEvent, XAPrepareEvent)):
                    break  # the group at that position ended without preparing this XID
        except STREAM_ERRORS as exc:
            raise self.binlog_server.mysql.error(
                exc, "reading a prepared XA transaction from", start
            ) from None
        finally:
            self._close(reader, end_dump_thread=True)
        raise SourceError(
            f"XA transaction {xa.xid} is listed as prepared at {xa.file}:{xa.pos} in the "
            f"checkpoint, but its XA PREPARE is not there; {GAP_ADVICE}"
        )

    def _lost(
        self, exc: BaseException, assembler: TransactionAssembler, read_from: ResumePosition
    ) -> ResumePosition:
        """Where to reconnect after a loss; raises if reconnecting cannot help (bad grants,
        a refused position, another reader with this server_id)."""
        error = self.binlog_server.mysql.error(exc, "streaming the binlog of", read_from)
        if not error.transient:
            raise error from None
        position = assembler.restart()
        self.reconnects += 1
        log.warning(
            "binlog stream from %s lost (%s); reconnect %d in %.1fs from %s",
            self._where(),
            exc,
            self.reconnects,
            self._delay,
            position,
        )
        return position

    def stop(self) -> None:
        """End :meth:`events` promptly, from any thread, even while it blocks or backs off."""
        self._stop.set()
        self._dump.shutdown()

    @property
    def stopped(self) -> bool:
        """True once :meth:`stop` was called."""
        return self._stop.is_set()

    def _reader(self, start: ResumePosition, plans: TablePlans) -> BinLogStreamReader:
        return self._dump.reader(start, plans, by_gtid=self._use_gtid(start))

    def _close(self, reader: BinLogStreamReader, *, end_dump_thread: bool) -> None:
        self._dump.close(reader, end_dump_thread=end_dump_thread)
        self._control.close()

    def _later(self, file: str, pos: int) -> list[LaterStatement]:
        """The binlog's DDL after ``file``:``pos`` (:meth:`.ControlConnection.later`)."""
        return self._control.later(self.server, file, pos)
