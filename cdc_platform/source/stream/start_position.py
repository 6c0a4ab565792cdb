"""Where a destination without a checkpoint starts reading: ``start:`` of instance.yaml.

``latest`` and ``initial`` take the binlog's current end (``initial`` snapshots every
captured table from there, see :mod:`cdc_platform.backfill.new_tables`); ``earliest`` the
start of the oldest binlog the server still has; ``position`` a file and offset, which must be
the start of a transaction; ``gtid`` the first transaction after a GTID state (MariaDB);
``timestamp`` the first transaction whose event time is at or after a UTC time.

The GTID and time searches read event *headers* only: files are chosen by their first
events (the ``Gtid_list`` event, or the file's creation time from its ``Format_description``
event, one short read per file, binary search over the files), then the binlog is scanned
from that file, with every event type but the transaction heads (MariaDB GTID, MySQL GTID,
MySQL anonymous GTID) skipped undecoded (the library reads the header, sees the type and
drops the body), so no row of the skipped binlog is decoded.

A start the server no longer has raises :class:`~cdc_platform.errors.StartPositionError`
naming the oldest position it has.
"""

from __future__ import annotations

import calendar
import logging
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.constants.BINLOG import ANONYMOUS_GTID_LOG_EVENT
from pymysqlreplication.event import (
    FormatDescriptionEvent,
    GtidEvent,
    MariadbGtidEvent,
    NotImplementedEvent,
    RotateEvent,
)

from cdc_platform.config.start import StartConfig
from cdc_platform.errors import SourceError, StartPositionError
from cdc_platform.events import ResumePosition
from cdc_platform.source.binlog_server import BinlogServer, _parse_gtids
from cdc_platform.source.mysql import library_connection
from cdc_platform.source.mysql_errors import MYSQL_ERRORS, STREAM_ERRORS

__all__ = [
    "HEAD_EVENTS",
    "BinlogFiles",
    "TransactionHead",
    "find_time",
    "resolve_start",
    "server_binlog",
    "transaction_at",
    "transaction_heads",
    "utc_seconds",
]

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
                f"start gtid {gtid}: the transactions after it up to sequence {seq} of "
                f"domain {domain} were "
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
        if head.gtid is None:
            continue
        domain, _server_id, seq = (int(p) for p in head.gtid.split("-"))
        if seq > wanted.get(domain, 0):
            return ResumePosition(head.file, head.pos)
    return server.current_position()


def transaction_at(server: BinlogServer, gtid: str) -> ResumePosition | None:
    """Where the transaction with the MariaDB GTID ``gtid`` starts in ``server``'s retained
    binlog (None: not there). A GTID names the same transaction on every server of a
    topology, at other files and positions: this finds it on a promoted replica. The file is
    the last whose ``Gtid_list`` is still before it; its transaction heads are scanned from
    there until the GTID, or a later one of its domain, comes."""
    parts = gtid.split("-")
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        return None
    domain, seq = int(parts[0]), int(parts[2])
    logs = _binary_logs(server)
    index = _last(logs, lambda file: _file_gtids(server, file).get(domain, 0) < seq)
    heads = _transactions(server, logs[index])
    try:
        for head in heads:
            if head.gtid == gtid:
                return ResumePosition(head.file, head.pos)
            found = _parse_gtids(head.gtid or "")
            if found.get(domain, 0) > seq:
                return None
    finally:
        _close(heads)
    return None


def _at_time(server: BinlogServer, logs: list[str], timestamp: str, oldest: str) -> ResumePosition:
    """The first transaction whose event time is at or after ``timestamp`` (whole seconds: the
    binlog keeps no fraction)."""
    return find_time(logs, timestamp, oldest, server_binlog(server))


def server_binlog(server: BinlogServer) -> BinlogFiles:
    """What the time search asks, answered by ``server``'s binlog."""
    return BinlogFiles(
        created=lambda file: _file_created(server, file),
        heads=lambda file: _transactions(server, file),
        holds_events=lambda file: _holds_events(server, file),
        end=server.current_position,
    )


@dataclass(frozen=True, slots=True)
class BinlogFiles:
    """What the time search asks of a server's binlog (fakes in the unit tests)."""

    created: Callable[[str], int]
    """When a file was created: its Format_description event's time."""
    heads: Callable[[str], Iterator[TransactionHead]]
    """Every transaction head from a file's start to the binlog's end."""
    holds_events: Callable[[str], bool]
    """Whether a file has an event past its head (Format_desc, Gtid_list, ...)."""
    end: Callable[[], ResumePosition]
    """The binlog's current end."""


def find_time(logs: list[str], timestamp: str, oldest: str, binlog: BinlogFiles) -> ResumePosition:
    """The first transaction head at or after ``timestamp``, in binlog order.

    The file to scan from is chosen by the files' creation times, not by their first
    transaction's time: an event's time is its statement's start, so a long statement
    committed after a rotation carries a time older than the file, and transactions of the
    target time may sit in the file before it. A file created before the target second holds
    nothing that started later in files before it (a transaction is written when it commits,
    after it started), so scanning from the last such file misses nothing.

    Raises:
        StartPositionError: the time is older than the oldest binlog file, or the binlog
            from there holds events but no transaction head the search recognises (never
            "the current end", which would silently skip everything).
    """
    target = int(utc_seconds(timestamp))
    heads = binlog.heads(logs[0])
    first = next(heads, None)
    _close(heads)
    if first is not None and first.timestamp > target:
        raise StartPositionError(
            f"start timestamp {timestamp} is older than the oldest binlog: its first "
            f"transaction is from {_utc(first.timestamp)}; the oldest position the server has "
            f"is {oldest}",
            oldest=oldest,
        )
    # Strictly before: a file created in the target second may follow one that ends with a
    # transaction of that second.
    index = _last(logs, lambda file: binlog.created(file) < target)
    seen = 0
    for head in binlog.heads(logs[index]):
        seen += 1
        if head.timestamp >= target:
            return ResumePosition(head.file, head.pos)
    if seen == 0 and any(binlog.holds_events(file) for file in logs[index:]):
        raise StartPositionError(
            f"start timestamp {timestamp}: the binlog from {logs[index]} holds events but no "
            "transaction start (GTID or anonymous GTID event) was found in it; refusing to "
            "guess. Start with mode position (a GTID event's position from SHOW BINLOG "
            f"EVENTS) instead; the oldest position the server has is {oldest}",
            oldest=oldest,
        )
    return binlog.end()


def _close(heads: Iterator[TransactionHead]) -> None:
    """End a scan early (a generator's close ends its reader's connection)."""
    close = getattr(heads, "close", None)
    if close is not None:
        close()


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


def _reader(server: BinlogServer, file: str, events: list[type[Any]]) -> BinLogStreamReader:
    """A non-blocking header reader of ``events`` from the start of ``file``."""
    return BinLogStreamReader(
        connection_settings=server.mysql.stream_settings(read_timeout=60.0),
        server_id=server.config.server_id,
        log_file=file,
        log_pos=_FIRST_EVENT,
        resume_stream=True,
        blocking=False,
        is_mariadb=False,  # with True the library ignores log_file/log_pos
        only_events=events,
        # The library does not know MySQL's anonymous GTID event (a transaction's head when
        # GTIDs are off, MySQL 8's default): it comes as a NotImplementedEvent.
        filter_non_implemented_events=False,
        pymysql_wrapper=lambda **kwargs: library_connection(kwargs),
        enable_logging=False,
    )


HEAD_EVENTS: list[type[Any]] = [MariadbGtidEvent, GtidEvent, RotateEvent, NotImplementedEvent]
"""What the header scan asks the library for: transaction heads and rotations (MySQL's
anonymous GTID event is unknown to the library and comes as a NotImplementedEvent)."""


def transaction_heads(events: Iterable[Any], file: str) -> Iterator[TransactionHead]:
    """The transaction heads (MariaDB GTID, MySQL GTID or anonymous GTID) among the library's
    events of :data:`HEAD_EVENTS` read from the start of ``file``, following rotations."""
    current = file
    for event in events:
        if isinstance(event, RotateEvent):
            current = event.next_binlog
            continue
        if isinstance(event, NotImplementedEvent):
            if event.packet.event_type != ANONYMOUS_GTID_LOG_EVENT:
                continue
            gtid = None
        else:
            gtid = str(event.gtid)
        start = int(event.packet.log_pos) - int(event.packet.event_size)
        yield TransactionHead(current, start, int(event.timestamp), gtid)


def _transactions(server: BinlogServer, file: str) -> Iterator[TransactionHead]:
    """Every transaction's first event from the start of ``file`` to the binlog's end,
    reading headers only: other events are skipped undecoded."""
    reader = _reader(server, file, HEAD_EVENTS)
    try:
        yield from transaction_heads(reader, file)
    except STREAM_ERRORS + MYSQL_ERRORS as exc:
        raise server.mysql.error(exc, "scanning the binlog of") from None
    finally:
        reader.close()


def _file_created(server: BinlogServer, file: str) -> int:
    """When ``file`` was created: the time of its Format_description event (the dump's
    first event, after the fake Rotate, which has time 0)."""
    reader = _reader(server, file, [FormatDescriptionEvent])
    try:
        for event in reader:
            return int(event.timestamp)
    except STREAM_ERRORS + MYSQL_ERRORS as exc:
        raise server.mysql.error(exc, "reading the binlog of") from None
    finally:
        reader.close()
    raise StartPositionError(f"binlog {file} has no Format_description event", oldest=None)


def _holds_events(server: BinlogServer, file: str) -> bool:
    """Whether ``file`` holds an event past the ones at every file's head."""
    events = _events(server, file, _FIRST_EVENT, len(_FILE_HEAD_EVENTS) + 1)
    return any(kind not in _FILE_HEAD_EVENTS for kind, _pos, _info in events)


def _format(gtids: dict[int, int]) -> str:
    """A GTID state as a reader understands it: ``domain 0 up to sequence 40, ...`` (the
    server ids of a state's last transactions are not known here)."""
    return ", ".join(f"domain {d} up to sequence {s}" for d, s in sorted(gtids.items()))


def _utc(seconds: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))
