"""Where a destination without a checkpoint starts reading: ``start:`` of instance.yaml.

``latest`` and ``initial`` take the binlog's current end (``initial`` snapshots every
captured table from there, see :mod:`cdc_platform.backfill.new_tables`); ``earliest`` the
start of the oldest binlog the server still has; ``position`` a file and offset, which must be
the start of a transaction; ``gtid`` the first transaction after a GTID state (MariaDB);
``timestamp`` the first transaction whose event time is at or after a UTC time.

The GTID and time searches read event *headers* only: files are chosen by their first
event (the ``Gtid_list`` event, or the first transaction's time, one short read per file,
binary search over the files), then only that file is scanned, with every event type but the
GTID events skipped undecoded (the library reads the header, sees the type and drops the
body), so no row of the skipped binlog is decoded.

A start the server no longer has raises :class:`~cdc_platform.errors.StartPositionError`
naming the oldest position it has.
"""

from __future__ import annotations

import calendar
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.event import GtidEvent, MariadbGtidEvent, RotateEvent

from cdc_platform.config.models import StartConfig
from cdc_platform.errors import SourceError, StartPositionError
from cdc_platform.events import ResumePosition
from cdc_platform.source.binlog_server import BinlogServer, _parse_gtids
from cdc_platform.source.mysql import MYSQL_ERRORS, STREAM_ERRORS, library_connection

__all__ = ["TransactionHead", "resolve_start", "utc_seconds"]

log = logging.getLogger("cdc_platform.source")

_FIRST_EVENT = 4
"""Every binlog file's first event starts at offset 4 (after the magic number)."""
_TRANSACTION_STARTS = {"Gtid", "Anonymous_Gtid"}
_FILE_HEAD_EVENTS = {"Format_desc", "Gtid_list", "Binlog_checkpoint", "Previous_gtids", "Rotate"}
"""Events at a file's head, before its first transaction: a start there is a clean start."""


@dataclass(frozen=True, slots=True)
class TransactionHead:
    """A transaction's first event as the header scan sees it."""

    file: str
    pos: int
    timestamp: int
    gtid: str | None


def utc_seconds(text: str) -> float:
    """``2026-11-22T10:00:00[.ffffff]Z`` as Unix seconds (the config validated the form)."""
    whole, _, fraction = text.rstrip("Z").partition(".")
    seconds = calendar.timegm(time.strptime(whole, "%Y-%m-%dT%H:%M:%S"))
    return seconds + (float(f"0.{fraction}") if fraction else 0.0)


def resolve_start(server: BinlogServer, start: StartConfig) -> ResumePosition:
    """The position ``start`` names on ``server`` (the binlog's current end for
    ``latest``/``initial``), checked to be in its retained binlog.

    Raises:
        StartPositionError: the start is not in the retained binlog (names the oldest).
        SourceError: the server could not be asked (transient when unreachable).
    """
    if start.mode in ("latest", "initial"):
        return server.current_position()
    logs = _binary_logs(server)
    oldest = f"{logs[0]}:{_FIRST_EVENT}"
    if start.mode == "earliest":
        position = ResumePosition(logs[0], _FIRST_EVENT)
    elif start.mode == "position":
        assert start.file is not None
        assert start.pos is not None
        position = _checked_position(server, logs, start.file, start.pos, oldest)
    elif start.mode == "gtid":
        assert start.gtid is not None
        position = _after_gtid(server, logs, start.gtid, oldest)
    else:
        assert start.timestamp is not None
        position = _at_time(server, logs, start.timestamp, oldest)
    log.info("start %s resolves to %s", start.describe(), position)
    return server.check_start(position, by_gtid=False)


def _binary_logs(server: BinlogServer) -> list[str]:
    names = [str(row[0]) for row in server.query("SHOW BINARY LOGS")]
    if not names:
        raise StartPositionError("the server has no binlog files", oldest=None)
    return names


def _events(server: BinlogServer, file: str, pos: int, limit: int) -> list[tuple[str, int, str]]:
    """(event type, position, info) of up to ``limit`` events of ``file`` from ``pos``."""
    rows = server.query(f"SHOW BINLOG EVENTS IN %s FROM %s LIMIT {int(limit)}", (file, pos))
    return [(str(r[2]), int(r[1]), str(r[5])) for r in rows]


def _checked_position(
    server: BinlogServer, logs: list[str], file: str, pos: int, oldest: str
) -> ResumePosition:
    """``file:pos`` if it is in the retained binlog and starts a transaction."""
    if file not in logs:
        raise StartPositionError(
            f"start position {file}:{pos}: binlog {file} is not on the server (purged, or "
            f"never written); the oldest position it has is {oldest} (binlogs {logs[0]} to "
            f"{logs[-1]})",
            oldest=oldest,
        )
    try:
        head = _events(server, file, pos, 1)
    except SourceError as exc:
        raise StartPositionError(
            f"start position {file}:{pos} is not the start of an event in {file} ({exc}); "
            f"the oldest position the server has is {oldest}",
            oldest=oldest,
        ) from None
    if head and head[0][0] not in _TRANSACTION_STARTS | _FILE_HEAD_EVENTS:
        raise StartPositionError(
            f"start position {file}:{pos} is a {head[0][0]} event inside a transaction, not "
            "the start of one: use the position of a GTID event (SHOW BINLOG EVENTS); the "
            f"oldest position the server has is {oldest}",
            oldest=oldest,
        )
    return ResumePosition(file, pos)


def _file_gtids(server: BinlogServer, file: str) -> dict[int, int]:
    """The GTID state before ``file`` (its Gtid_list event), highest seq per domain."""
    for kind, _pos, info in _events(server, file, _FIRST_EVENT, 3):
        if kind == "Gtid_list":
            return _parse_gtids(info)
    return {}


def _after_gtid(server: BinlogServer, logs: list[str], gtid: str, oldest: str) -> ResumePosition:
    """The first transaction not in the MariaDB GTID state ``gtid``."""
    if not server.is_mariadb():
        raise StartPositionError(
            f"start gtid {gtid}: starting at a GTID is supported on MariaDB only so far; use "
            "mode position or timestamp on MySQL",
            oldest=oldest,
        )
    wanted = _parse_gtids(gtid)
    if not wanted:
        raise StartPositionError(
            f"start gtid {gtid!r} is not a MariaDB GTID list (domain-server-seq)", oldest=oldest
        )
    first = _file_gtids(server, logs[0])
    for domain, seq in first.items():
        if wanted.get(domain, 0) < seq:
            raise StartPositionError(
                f"start gtid {gtid}: the transactions after it up to {domain}-?-{seq} were "
                f"purged; the oldest position the server has is {oldest} (GTID state "
                f"{_format(first)})",
                oldest=oldest,
            )
    current = _parse_gtids(str(server.query("SELECT @@GLOBAL.gtid_binlog_pos")[0][0] or ""))
    for domain, seq in wanted.items():
        if seq > current.get(domain, 0):
            raise StartPositionError(
                f"start gtid {gtid} is ahead of the server's binlog "
                f"({_format(current) or 'empty'})",
                oldest=oldest,
            )

    def covered(file: str) -> bool:
        return all(wanted.get(d, 0) >= s for d, s in _file_gtids(server, file).items())

    index = _last(logs, covered)
    for head in _transactions(server, logs[index]):
        domain, _server_id, seq = (int(p) for p in str(head.gtid).split("-"))
        if seq > wanted.get(domain, 0):
            return ResumePosition(head.file, head.pos)
    return server.current_position()


def _at_time(server: BinlogServer, logs: list[str], timestamp: str, oldest: str) -> ResumePosition:
    """The first transaction whose event time is at or after ``timestamp`` (whole seconds: the
    binlog keeps no fraction)."""
    target = int(utc_seconds(timestamp))
    first_times: dict[str, int | None] = {}

    def first_time(file: str) -> int | None:
        if file not in first_times:
            head = next(_transactions(server, file, this_file_only=True), None)
            first_times[file] = None if head is None else head.timestamp
        return first_times[file]

    oldest_time = first_time(logs[0])
    if oldest_time is not None and oldest_time > target:
        raise StartPositionError(
            f"start timestamp {timestamp} is older than the oldest binlog: its first "
            f"transaction is from {_utc(oldest_time)}; the oldest position the server has is "
            f"{oldest}",
            oldest=oldest,
        )

    def started_before(file: str) -> bool:
        # Strictly before: a transaction of the target second may end the previous file.
        found = first_time(file)
        return found is not None and found < target

    index = _last(logs, started_before)
    for head in _transactions(server, logs[index]):
        if head.timestamp >= target:
            return ResumePosition(head.file, head.pos)
    return server.current_position()


def _last(logs: list[str], holds: Callable[[str], bool]) -> int:
    """The index of the last file for which ``holds`` is true (0 if none), by binary search
    (``holds`` is true for a prefix of the files). A file it cannot judge (no transaction)
    counts as false: the search may then land on an earlier file, which is safe, since the
    scan goes forward from there; it never lands on a later one than the answer."""
    low, high = 0, len(logs) - 1
    while low < high:
        middle = (low + high + 1) // 2
        if holds(logs[middle]):
            low = middle
        else:
            high = middle - 1
    return low


def _transactions(
    server: BinlogServer, file: str, *, this_file_only: bool = False
) -> Iterator[TransactionHead]:
    """Every transaction's first event from the start of ``file`` to the binlog's end (or the
    end of ``file``), reading headers only: other events are skipped undecoded."""
    settings = server.mysql.stream_settings(read_timeout=60.0)
    reader = BinLogStreamReader(
        connection_settings=settings,
        server_id=server.config.server_id,
        log_file=file,
        log_pos=_FIRST_EVENT,
        resume_stream=True,
        blocking=False,
        is_mariadb=False,  # with True the library ignores log_file/log_pos
        only_events=[MariadbGtidEvent, GtidEvent, RotateEvent],
        pymysql_wrapper=lambda **kwargs: library_connection(kwargs),
        enable_logging=False,
    )
    current = file
    try:
        for event in reader:
            if isinstance(event, RotateEvent):
                if this_file_only and event.next_binlog != file:
                    return
                current = event.next_binlog
                continue
            start = int(event.packet.log_pos) - int(event.packet.event_size)
            gtid = getattr(event, "gtid", None)
            yield TransactionHead(current, start, int(event.timestamp), gtid and str(gtid))
    except STREAM_ERRORS + MYSQL_ERRORS as exc:
        raise server.mysql.error(exc, "scanning the binlog of") from None
    finally:
        reader.close()


def _format(gtids: dict[int, int]) -> str:
    return ",".join(f"{d}-?-{s}" for d, s in sorted(gtids.items()))


def _utc(seconds: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))
