"""The id-watch source: tables polled by increasing id, repaired by periodic full lists.

For servers without binlog access (like SOFARegistry's table watch). Three mechanisms,
all run by :meth:`IdWatchSource.events` in the reader thread, one after the other:

* **watch** (every ``poll_interval_seconds``): per table, ``WHERE id > last ORDER BY id
  LIMIT page``, emitted in id order up to (not including) the first row whose created time is
  within ``stability_delay_seconds`` of the database's clock (SOFARegistry's
  listStableEntries / listToTail). An insert whose lower id commits after a higher one is still
  in that window when the higher one is read, so the watch stops before it and reads both later.
* **list** (at start, then after a delay drawn uniformly from ``list_interval_minutes``, like
  SOFARegistry's ListLoop): the whole table in primary-key chunks, compared with the known
  state (primary key -> digest of the row image) to emit what the watch cannot see: updates,
  deletes, and rows the watch skipped (an insert slower than the stability delay).
* **cleanup** (after each list, when ``expire`` is set): rows marked deleted and not modified
  for ``after_seconds`` are deleted in batches of ``batch_size``, at most
  ``max_batches_per_round`` per round; each batch's keys are re-read at once, so its deletes
  reach the change log in the same transaction instead of waiting for the next list
  (:mod:`.cleanup`).

Each change goes out in a whole transaction whose COMMIT holds the position (:mod:`.emitter`).

What the change log gets (docs/id_watch.md):

* a watch row whose key is new to the known state: op ``c``; a watch row whose key is known
  with a different image: op ``r`` (a full after image, applied as an upsert); a known row with
  the same image: nothing;
* a list row that is new or changed: op ``r``; a known key the list no longer finds: op ``d``
  whose ``before`` holds the key columns only (the source keeps digests, not images).

The known state is rebuilt at start from the newest image's digest per key in the change log
(streamed, never the images: :func:`load_known_state`), so a
restart neither loses nor repeats rows; the position (per-table last id) is a
:class:`~cdc_platform.events.ResumePosition` whose ``file`` holds the watch state as JSON
(:class:`WatchPosition`) and whose ``pos`` counts the source's transactions.
"""

from __future__ import annotations

import contextlib
import logging
import random
import threading
import time
from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from pydantic import SecretStr

from cdc_platform.config.id_watch import IdWatchConfig
from cdc_platform.config.source import SourceConfig
from cdc_platform.config.start import StartConfig
from cdc_platform.errors import (
    ConfigError,
    SourceError,
)
from cdc_platform.events import (
    ChangeEvent,
    Op,
    ResumePosition,
)
from cdc_platform.infra.clock import SYSTEM_CLOCK, Clock
from cdc_platform.source.id_watch.cleanup import ExpiredRows
from cdc_platform.source.id_watch.emitter import Emitter
from cdc_platform.source.id_watch.state import (
    Change,
    KnownState,
    ListSchedule,
    WatchPosition,
    WatchRow,
    load_known_state,
    stable_prefix,
)
from cdc_platform.source.id_watch.tables import WatchedTable, db_now, describe_watched
from cdc_platform.source.mysql import Connection, SourceServer
from cdc_platform.source.mysql_errors import MYSQL_ERRORS
from cdc_platform.source.reading.row_reader import read_chunk, select_rows
from cdc_platform.source.sql import quote_identifier

__all__ = ["ID_WATCH_GRANTS", "IdWatchInfo", "IdWatchSource"]

log = logging.getLogger("cdc_platform.source.id_watch.watch")

_FAILURES: tuple[type[BaseException], ...] = (*MYSQL_ERRORS, SourceError)
"""What a round of reading may raise: library errors (translated) and the engine's own."""

ID_WATCH_GRANTS = "id_watch needs SELECT on the watched tables, and DELETE on those with `expire`"
"""Advice on a missing privilege."""


@dataclass(frozen=True, slots=True)
class IdWatchInfo:
    """What :meth:`IdWatchSource.check` found."""

    version: str
    tables: tuple[str, ...]


class IdWatchSource:
    """Polls tables by id (watch), lists them fully now and then (list), and deletes expired
    rows (cleanup); the same interface as :class:`~cdc_platform.source.stream.binlog.BinlogSource`.

    ``events()`` is a blocking generator for one reader thread; ``stop()`` may be called from
    any thread. ``reconnects`` counts lost connections. ``table_uri`` (the destination's change
    log) is read at start to rebuild the known state; without it the state starts empty and
    the first list emits every row as ``r``. ``clock`` drives the poll pause, the list timer and
    the back-off; ``rng`` the list interval; tests inject both.
    """

    def __init__(  # noqa: PLR0913 (the config; the rest are keyword-only collaborators and settings)
        self,
        config: SourceConfig,
        *,
        resume: ResumePosition | None = None,
        password: str | SecretStr | None = None,
        table_uri: str | None = None,
        storage_options: dict[str, str] | None = None,
        clock: Clock = SYSTEM_CLOCK,
        rng: random.Random | None = None,
    ) -> None:
        if config.id_watch is None:
            raise ConfigError("IdWatchSource needs source.id_watch (source.mode: id_watch)")
        self.config = config
        self.watch: IdWatchConfig = config.id_watch
        self.resume = resume
        self.reconnects = 0
        self.rounds = 0
        """Watch rounds completed (for tests and metrics)."""
        self.lists = 0
        """Full lists completed (for tests and metrics)."""
        self._mysql = SourceServer(config, password, purpose="id_watch", grants=ID_WATCH_GRANTS)
        """The MySQL boundary every connection and error of this source goes through."""
        self._table_uri = table_uri
        self._storage_options = storage_options
        self._clock = clock
        self._rng = rng or random.Random()  # noqa: S311 - a timer jitter, not a secret
        self._stop = threading.Event()
        self._expired = ExpiredRows(self._stop)

    @property
    def expired_deleted(self) -> int:
        """Rows deleted by the expired-row cleanup."""
        return self._expired.deleted

    def _connect(self) -> Connection:
        return self._mysql.connect(max(60.0, self.config.connect_timeout_seconds))

    # -- interface -----------------------------------------------------------------------------

    def check(self) -> IdWatchInfo:
        """Verify the resume position and every watched table: it exists, has a primary key,
        an integer id column with a unique index, a DATETIME/TIMESTAMP created column, and
        the expire columns. Raises ConfigError/SourceError naming the table and the fix."""
        if self.resume is not None:
            WatchPosition.from_resume(self.resume)
        conn = self._connect()
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT VERSION()")
                row = cur.fetchone()
            version = str(row[0]) if row else "?"
            describe_watched(conn, self.watch.tables)
        except MYSQL_ERRORS as exc:
            raise self._mysql.error(exc, "checking the watched tables on") from None
        finally:
            conn.close()
        return IdWatchInfo(version, tuple(t.table for t in self.watch.tables))

    def current_position(self) -> ResumePosition:
        """Where a new destination starts: before every row (last id 0 for every table), so
        the watch copies the tables' existing rows first, as inserts."""
        return WatchPosition({t.table: 0 for t in self.watch.tables}, 0).to_resume()

    def start_position(self, start: StartConfig) -> ResumePosition:
        """The watch begins at its own start (:meth:`current_position`) whatever ``start``."""
        return self.current_position()

    def oldest_prepared_xa_age(self) -> float | None:
        """Tables read by id hold no XA transactions."""
        return None

    def binlog_retention_headroom(self, committed_source_time: float | None) -> float | None:
        """Tables read by id need no binlog."""
        return None

    def stop(self) -> None:
        """End :meth:`events` promptly (after the statement in flight), from any thread."""
        self._stop.set()

    @property
    def stopped(self) -> bool:
        """True once :meth:`stop` was called."""
        return self._stop.is_set()

    def event_lists(self) -> Iterator[list[ChangeEvent]]:
        """:meth:`events`, one event a list (a round's rows come out as they are listed)."""
        for event in self.events():
            yield [event]

    def events(self) -> Generator[ChangeEvent, None, None]:
        """Whole transactions (ROW events, then a COMMIT) until :meth:`stop`.

        A lost connection is retried forever with exponential back-off; the round in flight is
        run again (a list from its start). Missing tables, columns or privileges raise
        SourceError.
        """
        start = (
            WatchPosition.from_resume(self.resume)
            if self.resume is not None
            else WatchPosition.from_resume(self.current_position())
        )
        names = [t.table for t in self.watch.tables]
        position = WatchPosition({name: start.last_ids.get(name, 0) for name in names}, start.txn)
        known = (
            load_known_state(self._table_uri, names, self._storage_options)
            if self._table_uri is not None
            else KnownState()
        )
        log.info(
            "id_watch: starting at %s with %d known rows",
            position.file(),
            sum(known.size(n) for n in names),
        )
        emitter = Emitter(position, self.config.server_id, self._clock)
        schedule = ListSchedule(self.watch.list_interval_minutes, self._clock, self._rng)
        delay = self.config.reconnect_initial_seconds
        conn: Connection | None = None
        try:
            while not self._stop.is_set():
                try:
                    if conn is None:
                        conn = self._connect()
                        tables = describe_watched(conn, self.watch.tables)
                    found = yield from self._watch_round(conn, tables, known, emitter)
                    self.rounds += 1
                    if schedule.due() and not self._stop.is_set():
                        # A list picks up added columns.
                        tables = describe_watched(conn, self.watch.tables)
                        yield from self._list(conn, tables, known, emitter)
                        yield from self._expired.run(conn, tables, known, emitter)
                        wait = schedule.listed()
                        log.info("id_watch: list %d done; next in %.0f s", self.lists, wait)
                    delay = self.config.reconnect_initial_seconds
                except _FAILURES as exc:
                    if self._stop.is_set():
                        return
                    error = (
                        exc if isinstance(exc, SourceError) else self._mysql.error(exc, "reading")
                    )
                    if not error.transient:
                        raise error from None
                    self.reconnects += 1
                    log.warning(
                        "id_watch: %s; reconnect %d in %.1f s", error, self.reconnects, delay
                    )
                    if conn is not None:
                        _close_quietly(conn)
                        conn = None
                    if self._clock.sleep(delay, self._stop):
                        return
                    delay = min(delay * 2, self.config.reconnect_max_seconds)
                    continue
                if not found:
                    self._clock.sleep(self.watch.poll_interval_seconds, self._stop)
        finally:
            if conn is not None:
                _close_quietly(conn)

    # -- watch ---------------------------------------------------------------------------------

    def _watch_round(
        self,
        conn: Connection,
        tables: Sequence[WatchedTable],
        known: KnownState,
        emitter: Emitter,
    ) -> Generator[ChangeEvent, None, bool]:
        """One pass over every table, each read to its stable tail; True if anything moved."""
        moved = False
        for table in tables:
            last = emitter.last_ids[table.name]
            start = last
            # One clock reading per table and round: an older "now" only makes the cut stricter.
            now_local, now_utc = db_now(conn)
            while not self._stop.is_set():
                rows = self._watch_page(conn, table, last, now_local, now_utc)
                stable, cut = stable_prefix(rows)
                changes = known.diff(
                    table.name, ((r.pk, r.image) for r in stable), new_op=Op.INSERT
                )
                if stable:
                    last = stable[-1].id
                if changes:
                    yield from emitter.transaction(table, changes, last_id=last)
                    known.apply(table.name, changes)
                else:
                    emitter.last_ids[table.name] = last
                if cut or len(rows) < table.settings.page_size:
                    break
            if last != start:
                moved = True
        if emitter.last_ids != emitter.emitted:
            # Only known rows were read (e.g. after a restart): still store how far we got.
            yield from emitter.transaction(None, ())
        return moved

    def _watch_page(
        self,
        conn: Connection,
        table: WatchedTable,
        last: int,
        now_local: datetime,
        now_utc: datetime,
    ) -> list[WatchRow]:
        settings = table.settings
        delay = timedelta(seconds=settings.stability_delay_seconds)
        cut = (now_utc if table.created_type == "timestamp" else now_local) - delay
        created = quote_identifier(settings.created_column)
        id_col = quote_identifier(settings.id_column)
        extra = f"{id_col}, COALESCE({created} >= %s, 0)"
        records = select_rows(
            conn,
            table.spec,
            extra,
            f"WHERE {id_col} > %s ORDER BY {id_col} LIMIT {int(settings.page_size)}",
            (cut, last),
        )
        return [WatchRow(int(x[0]), pk, image, not int(x[1])) for pk, image, x in records]

    # -- list ----------------------------------------------------------------------------------

    def _list(
        self,
        conn: Connection,
        tables: Sequence[WatchedTable],
        known: KnownState,
        emitter: Emitter,
    ) -> Iterator[ChangeEvent]:
        """Every table in key chunks against the known state: ``r`` for new or changed rows,
        then ``d`` for known keys not found (one transaction per chunk)."""
        for table in tables:
            seen: set[str] = set()
            after: list[Any] | None = None
            page = table.settings.page_size
            last = emitter.last_ids[table.name]
            started = time.monotonic()
            emitted = 0
            while True:
                if self._stop.is_set():
                    return  # an unfinished list cannot tell deletes: rerun it next time
                chunk = read_chunk(conn, table.spec, after, page)
                seen.update(chunk.pks)
                # Rows past the watch position are the watch's (as inserts), not the list's.
                behind = [(pk, im) for pk, im in chunk.rows if table.id_of(pk, im) <= last]
                changes = known.diff(table.name, behind, new_op=Op.SNAPSHOT)
                if changes:
                    yield from emitter.transaction(table, changes)
                    known.apply(table.name, changes)
                    emitted += len(changes)
                if chunk.last_key is None or len(chunk) < page:
                    break
                after = chunk.last_key
            gone = known.gone(table.name, seen)
            for index in range(0, len(gone), page):
                deletes = [Change(Op.DELETE, pk, None) for pk in gone[index : index + page]]
                yield from emitter.transaction(table, deletes)
                known.apply(table.name, deletes)
            log.info(
                "id_watch: listed %s: %d rows, %d new or changed, %d gone (%.1f s)",
                table.name,
                len(seen),
                emitted,
                len(gone),
                time.monotonic() - started,
            )
        self.lists += 1


def _close_quietly(conn: Connection) -> None:
    with contextlib.suppress(*MYSQL_ERRORS):
        conn.close()
