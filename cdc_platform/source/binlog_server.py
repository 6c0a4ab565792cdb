"""What the binlog source asks the server before it reads: whether its settings and the user's
grants allow lossless CDC, which server it is, where its binlog ends, and whether a start
position is still in its binlog.

Every question runs on a short-lived connection of the MySQL boundary
(:class:`~cdc_platform.source.mysql.SourceServer`), so its failures are the engine's errors:
a purged start position is a BinlogGapError here, before any reading starts.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any

from pydantic import SecretStr

from cdc_platform.config.source import SourceConfig
from cdc_platform.errors import BinlogGapError, SourceError, SourceSettingsError
from cdc_platform.events import BinlogPosition, ResumePosition, ServerIdentity
from cdc_platform.source.mysql import Connection, SourceServer
from cdc_platform.source.mysql_errors import (
    GAP_ADVICE,
    MYSQL_ERRORS,
    PARSE_ERROR,
    error_code,
    is_missing_privilege,
)

__all__ = ["BINLOG_GRANTS", "BinlogServer", "SourceInfo", "binlog_end"]

log = logging.getLogger("cdc_platform.source")

BINLOG_GRANTS = "run GRANT SELECT, REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO '{user}'@'%'"
"""Advice on a missing privilege of the binlog source (``{user}`` is filled in)."""


@dataclass(frozen=True, slots=True)
class SourceInfo:
    """What :meth:`BinlogServer.check` found on the server."""

    version: str
    is_mariadb: bool
    server_id: int
    position: BinlogPosition
    """The server's current binlog end (SHOW MASTER STATUS)."""
    gtid_binlog_pos: str | None
    gtid_current_pos: str | None
    server: ServerIdentity | None = None
    """Which server this is; recorded with every checkpoint (see :class:`ServerIdentity`)."""


class BinlogServer:
    """The source server as the binlog source questions it (one short connection a question).

    ``mysql`` is the boundary every connection and error goes through: an error it does not
    know counts as a lost connection, retried with the reconnect backoff.
    """

    def __init__(self, config: SourceConfig, password: str | SecretStr | None = None) -> None:
        self.config = config
        self.mysql = SourceServer(
            config,
            password,
            grants=BINLOG_GRANTS.format(user=config.user),
            unknown_is_lost=True,
        )
        self._is_mariadb: bool | None = None

    def where(self) -> str:
        return self.mysql.where()

    def connect(self) -> Connection:
        """A connection for questions and the table catalog."""
        return self.mysql.connect(
            max(30.0, self.config.connect_timeout_seconds), utc_session=False, reads_rows=False
        )

    def query(self, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """One query on a short-lived connection (settings checks, positions)."""
        with self.connect() as conn, conn.cursor() as cur:
            try:
                cur.execute(sql, args)
                return list(cur.fetchall())
            except MYSQL_ERRORS as exc:
                raise self.mysql.error(exc, "querying") from None

    def retention_seconds(self) -> float | None:
        """How long the server keeps binlogs (``binlog_expire_logs_seconds``, else
        ``expire_logs_days``), 0 for ever; None when it cannot be asked now (retried later)."""
        try:
            rows = self.query(
                "SHOW GLOBAL VARIABLES WHERE Variable_name IN "
                "('binlog_expire_logs_seconds', 'expire_logs_days')"
            )
        except SourceError as exc:
            log.debug("cannot read the binlog retention: %s", exc)
            return None
        values = {str(name): float(value or 0) for name, value in rows}
        seconds = values.get("binlog_expire_logs_seconds", 0.0)
        return seconds or values.get("expire_logs_days", 0.0) * 86400

    def is_mariadb(self) -> bool:
        if self._is_mariadb is None:
            version = self.query("SELECT VERSION()")[0][0]
            self._is_mariadb = "mariadb" in str(version).lower()
        return self._is_mariadb

    def end_connection(self, thread_id: int) -> None:
        """KILL CONNECTION ``thread_id`` (waiting 2 s at most). A user may always kill its own
        connections; a failure only means the connection is gone already (logged)."""
        timeout = min(self.config.connect_timeout_seconds, 2.0)
        try:
            conn = self.mysql.connect(
                2.0, connect_timeout=timeout, utc_session=False, reads_rows=False
            )
        except SourceError:
            log.debug("ending connection %d failed", thread_id, exc_info=True)
            return
        try:
            with conn, conn.cursor() as cur:
                cur.execute("KILL CONNECTION %s", (thread_id,))
        except MYSQL_ERRORS:
            log.debug("ending connection %d failed", thread_id, exc_info=True)

    # -- checks --------------------------------------------------------------------------------

    def check(self) -> SourceInfo:
        """Verify binlog settings and grants; SourceSettingsError lists every problem and fix."""
        with self.connect() as conn, conn.cursor() as cur:
            try:
                cur.execute("SELECT VERSION(), @@server_id")
                version, server_id = cur.fetchone() or ("", 0)
                cur.execute(
                    "SHOW GLOBAL VARIABLES WHERE Variable_name IN ('log_bin', 'binlog_format', "
                    "'binlog_row_image', 'binlog_row_metadata', 'log_bin_compress', "
                    "'binlog_transaction_compression', 'binlog_row_value_options', "
                    "'gtid_binlog_pos', 'gtid_current_pos')"
                )
                variables = {str(k).lower(): str(v) for k, v in cur.fetchall()}
                cur.execute("SHOW GRANTS")
                grants = [str(row[0]) for row in cur.fetchall()]
                cur.execute("SELECT CURRENT_USER()")
                account = _account(str((cur.fetchone() or ("",))[0]), self.config.user)
                status = _status_if_allowed(cur) if variables.get("log_bin") == "ON" else None
                is_mariadb = "mariadb" in str(version).lower()
                self._is_mariadb = is_mariadb
                server = _identity(cur, is_mariadb)
            except MYSQL_ERRORS as exc:
                raise self.mysql.error(exc, "checking") from None
        problems = _settings_problems(variables, is_mariadb)
        if int(server_id) == self.config.server_id:
            problems.append(
                f"the reader's server_id {self.config.server_id} equals the source server's own "
                "server_id; choose another server_id in the destination's source config"
            )
        if self.config.resume_by == "gtid" and not is_mariadb:
            problems.append(
                "resume_by=gtid is supported on MariaDB only; set resume_by: file for MySQL"
            )
        missing = _missing_grants(grants)
        if missing:
            problems.append(
                f"user {account} lacks {', '.join(missing)}; run GRANT "
                f"{', '.join(missing)} ON *.* TO {account}"
            )
        if problems:
            raise SourceSettingsError(
                f"{self.where()} cannot be used for lossless CDC: " + "; ".join(problems)
            )
        if status is None:
            raise SourceSettingsError(f"{self.where()} reports no binlog position")
        return SourceInfo(
            version=str(version),
            is_mariadb=is_mariadb,
            server_id=int(server_id),
            position=BinlogPosition(str(status[0]), int(status[1])),
            gtid_binlog_pos=variables.get("gtid_binlog_pos"),
            gtid_current_pos=variables.get("gtid_current_pos"),
            server=server,
        )

    # -- positions -----------------------------------------------------------------------------

    def current_position(self) -> ResumePosition:
        """The server's current binlog end, as a position to start reading from.

        On MariaDB the GTID state comes from ``BINLOG_GTID_POS(file, pos)`` so that file,
        position and GTID state describe the same point even while the server writes.
        """
        with self.connect() as conn, conn.cursor() as cur:
            try:
                status = _binlog_status(cur)
                if status is None:
                    raise SourceSettingsError(
                        "binary logging is off (log_bin=OFF); start the server with "
                        "log_bin=mysql-bin"
                    )
                file, pos = str(status[0]), int(status[1])
                gtid: str | None = None
                if self.is_mariadb():
                    cur.execute("SELECT BINLOG_GTID_POS(%s, %s)", (file, pos))
                    row = cur.fetchone()
                    gtid = None if row is None or row[0] is None else str(row[0])
                elif len(status) > 4 and status[4]:
                    # MySQL: Executed_Gtid_Set, read with file and position in one statement.
                    gtid = "".join(str(status[4]).split())
                server = _identity(cur, self.is_mariadb())
            except MYSQL_ERRORS as exc:
                raise self.mysql.error(exc, "reading the binlog position of") from None
        return ResumePosition(file=file, pos=pos, gtid_set=gtid, server=server)

    def identity(self) -> ServerIdentity:
        """Which server is behind the address now."""
        with self.connect() as conn, conn.cursor() as cur:
            try:
                return _identity(cur, self.is_mariadb())
            except MYSQL_ERRORS as exc:
                raise self.mysql.error(exc, "identifying") from None

    def bytes_after(self, position: BinlogPosition) -> int:
        """Binlog bytes the server holds after ``position`` (all of them when its file is
        gone): how far a reader starting there is behind."""
        logs = [(str(name), int(size)) for name, size, *_ in self.query("SHOW BINARY LOGS")]
        names = [name for name, _ in logs]
        if position.file not in names:
            return sum(size for _, size in logs)
        first = names.index(position.file)
        sizes = [size for _, size in logs[first:]]
        return max(0, sizes[0] - position.pos) + sum(sizes[1:])

    def check_start(self, start: ResumePosition, *, by_gtid: bool) -> ResumePosition:
        """Refuse a start position whose binlog is gone (BinlogGapError); fill in the GTID
        state if missing. ``by_gtid``: the read resumes from ``start.gtid_set``."""
        logs = {str(name): int(size) for name, size, *_ in self.query("SHOW BINARY LOGS")}
        if by_gtid:
            assert start.gtid_set is not None
            self._check_gtid_gap(start.gtid_set, next(iter(logs)) if logs else None)
        else:
            size = logs.get(start.file)
            if size is None:
                raise BinlogGapError(
                    f"binlog {start.file} was purged; {GAP_ADVICE} (the server's binlogs: "
                    f"{_log_range(list(logs))})"
                )
            if start.pos > size:
                raise BinlogGapError(
                    f"position {start.pos} is beyond the end of {start.file} ({size} bytes): the "
                    f"server's binlog was reset or rewritten; {GAP_ADVICE}"
                )
        if start.gtid_set is None and self.is_mariadb():
            rows = self.query("SELECT BINLOG_GTID_POS(%s, %s)", (start.file, start.pos))
            if rows and rows[0][0] is not None:
                return ResumePosition(start.file, start.pos, str(rows[0][0]), start.skip_events)
        return start

    def _check_gtid_gap(self, gtid_set: str, first_log: str | None) -> None:
        """A GTID state older than the oldest binlog's Gtid_list means purged transactions."""
        if first_log is None:
            raise BinlogGapError(f"the server has no binlog files; {GAP_ADVICE}")
        head = self.query("SHOW BINLOG EVENTS IN %s LIMIT 3", (first_log,))
        oldest = next((_parse_gtids(str(r[5])) for r in head if r[2] == "Gtid_list"), {})
        current = _parse_gtids(str(self.query("SELECT @@GLOBAL.gtid_binlog_pos")[0][0] or ""))
        wanted = _parse_gtids(gtid_set)
        for domain, seq in oldest.items():
            if wanted.get(domain, 0) < seq:
                raise BinlogGapError(
                    f"GTID state {gtid_set or '(empty)'} is older than the oldest binlog "
                    f"{first_log}, which starts after {domain}-{seq}: transactions were purged; "
                    f"{GAP_ADVICE}"
                )
        for domain, seq in wanted.items():
            if seq > current.get(domain, 0):
                raise BinlogGapError(
                    f"GTID state {gtid_set} is ahead of the server's binlog "
                    f"({_format_gtids(current) or 'empty'}): the binlog was reset or this is "
                    f"another server; {GAP_ADVICE}"
                )


# -- settings helpers ---------------------------------------------------------------------------


def _status_if_allowed(cur: Any) -> tuple[Any, ...] | None:
    """SHOW MASTER STATUS, or None without REPLICATION CLIENT (reported with the grants)."""
    try:
        return _binlog_status(cur)
    except MYSQL_ERRORS as exc:
        if is_missing_privilege(exc):
            return None
        raise


def _identity(cur: Any, is_mariadb: bool) -> ServerIdentity:
    """The connected server's identity (see :class:`ServerIdentity`)."""
    if is_mariadb:
        cur.execute("SELECT @@server_id, @@gtid_domain_id")
        server_id, domain = cur.fetchone()
        return ServerIdentity(int(server_id), gtid_domain_id=int(domain))
    cur.execute("SELECT @@server_id, @@server_uuid")
    server_id, uuid = cur.fetchone()
    return ServerIdentity(int(server_id), server_uuid=str(uuid))


def binlog_end(conn: Connection) -> BinlogPosition:
    """The server's binlog end (file and offset), read on the caller's open connection.

    One statement, no GTID state and no new connection: the watermarks of a snapshot chunk
    need only the place, and :meth:`BinlogServer.current_position` costs a connection and a
    scan of the current binlog file (``BINLOG_GTID_POS``) for its GTID state. Driver errors
    are the caller's to translate.

    Raises:
        SourceSettingsError: binary logging is off.
    """
    with conn.cursor() as cur:
        status = _binlog_status(cur)
    if status is None:
        raise SourceSettingsError(
            "binary logging is off (log_bin=OFF); start the server with log_bin=mysql-bin"
        )
    return BinlogPosition(str(status[0]), int(status[1]))


def _binlog_status(cur: Any) -> tuple[Any, ...] | None:
    try:
        cur.execute("SHOW MASTER STATUS")
    except MYSQL_ERRORS as exc:  # MySQL 8.4 renamed it
        if error_code(exc) != PARSE_ERROR:
            raise
        cur.execute("SHOW BINARY LOG STATUS")
    row: tuple[Any, ...] | None = cur.fetchone()
    return row


_REQUIRED_SETTINGS = (
    ("binlog_format", "ROW"),
    ("binlog_row_image", "FULL"),
    ("binlog_row_metadata", "FULL"),
)


def _settings_problems(variables: dict[str, str], is_mariadb: bool) -> list[str]:
    problems: list[str] = []
    if variables.get("log_bin", "OFF").upper() not in ("ON", "1"):
        problems.append(
            "binary logging is off (log_bin=OFF); start the server with log_bin=mysql-bin "
            "and a non-zero server_id"
        )
    for name, wanted in _REQUIRED_SETTINGS:
        value = variables.get(name)
        if value is None:
            problems.append(
                f"the server has no {name} setting; lossless CDC needs MariaDB >= 10.5 or "
                "MySQL >= 8.0.14"
            )
        elif value.upper() != wanted:
            problems.append(f"{name} is {value}; set {name}={wanted} in the server config")
    if is_mariadb and variables.get("log_bin_compress", "OFF").upper() in ("ON", "1"):
        problems.append(
            "log_bin_compress is ON; set log_bin_compress=OFF in the server config "
            "(compressed rows events cannot be decoded)"
        )
    if variables.get("binlog_transaction_compression", "OFF").upper() in ("ON", "1"):
        problems.append(
            "binlog_transaction_compression is ON; set binlog_transaction_compression=OFF "
            "(compressed transactions cannot be decoded)"
        )
    if variables.get("binlog_row_value_options", ""):
        problems.append(
            "binlog_row_value_options is PARTIAL_JSON; set binlog_row_value_options='' "
            "(partial JSON updates are not full row images)"
        )
    return problems


def _account(current_user: str, user: str) -> str:
    """``CURRENT_USER()`` (``user@host``: the account the server matched, whose grants count)
    as SQL writes it, ``'user'@'host'``; the configured user at ``'%'`` if it is empty."""
    name, at, host = current_user.rpartition("@")
    if not at:
        name, host = user, "%"
    return "'{}'@'{}'".format(name.replace("'", "''"), host.replace("'", "''"))


_GRANT = re.compile(r"^GRANT\s+(?P<privs>.+?)\s+ON\s+(?P<scope>\S+)\s+TO\s", re.I | re.S)
_REQUIRED_GRANTS = (
    ("REPLICATION SLAVE", {"REPLICATION SLAVE", "ALL PRIVILEGES", "ALL"}, True),
    (
        "REPLICATION CLIENT",
        {"REPLICATION CLIENT", "BINLOG MONITOR", "SUPER", "ALL PRIVILEGES", "ALL"},
        True,
    ),
    ("SELECT", {"SELECT", "ALL PRIVILEGES", "ALL"}, False),
)


def _missing_grants(grants: list[str]) -> list[str]:
    """Privileges missing from SHOW GRANTS (global ones for replication, any SELECT)."""
    global_privs: set[str] = set()
    any_privs: set[str] = set()
    for line in grants:
        match = _GRANT.match(line)
        if match is None:
            continue
        privs = re.sub(r"\([^)]*\)", "", match["privs"])  # column lists of table grants
        names = {" ".join(p.split()).upper() for p in privs.split(",")}
        any_privs |= names
        if match["scope"] == "*.*":
            global_privs |= names
    return [
        name
        for name, accepted, need_global in _REQUIRED_GRANTS
        if not (accepted & (global_privs if need_global else any_privs))
    ]


def _parse_gtids(text: str) -> dict[int, int]:
    """Highest sequence number per domain of a MariaDB GTID list ('[0-1-5,1-2-3]' or bare)."""
    out: dict[int, int] = {}
    for item in text.strip().strip("[]").split(","):
        parts = item.strip().split("-")
        if len(parts) == 3 and all(p.isdigit() for p in parts):
            domain, seq = int(parts[0]), int(parts[2])
            out[domain] = max(seq, out.get(domain, 0))
    return out


def _format_gtids(gtids: dict[int, int]) -> str:
    return ",".join(f"{d}-?-{s}" for d, s in sorted(gtids.items()))


def _log_range(names: list[str]) -> str:
    if not names:
        return "no binlog files"
    return f"{names[0]} to {names[-1]}" if len(names) > 1 else names[0]
