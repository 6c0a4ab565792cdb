"""The MySQL boundary's translation table: library errors (fakes with the servers' real codes
and texts) in, the engine's errors with their transient flag and advice out."""

from __future__ import annotations

import socket
import ssl
import struct

import pymysql
import pytest

from cdc_platform.config.source import SourceConfig
from cdc_platform.errors import (
    BinlogGapError,
    BinlogReadError,
    ServerIdConflictError,
    SourceConnectionError,
    SourceError,
    SourceLoginError,
    SourceSettingsError,
    SourceTableChangedError,
    SourceTableMissingError,
)
from cdc_platform.events import ResumePosition
from cdc_platform.source.mysql import SourceServer, mysql_connection
from cdc_platform.source.mysql_errors import (
    Failure,
    StreamLostError,
    classify,
    is_missing_privilege,
    is_missing_table,
    mysql_error,
    translate,
)
from cdc_platform.testing.library_internals import ssl_required

pytestmark = pytest.mark.unit

SECRET = "s3cret-PW"
err = pymysql.err

CASES = [
    (err.OperationalError(1045, f"Access denied for user 'cdc'@'h' ({SECRET})"),
     Failure.ACCESS_DENIED, SourceLoginError, False),
    (err.OperationalError(1698, "Access denied for user 'root'@'localhost'"),
     Failure.ACCESS_DENIED, SourceLoginError, False),
    (err.OperationalError(2003, "Can't connect to MySQL server on 'nohost' ([Errno -2] Name or "
     "service not known)"), Failure.UNKNOWN_HOST, SourceConnectionError, True),
    (socket.gaierror(-2, "Name or service not known"),
     Failure.UNKNOWN_HOST, SourceConnectionError, True),
    (err.OperationalError(2003, "Can't connect to MySQL server on '127.0.0.1' ([Errno 111] "
     "Connection refused)"), Failure.CONNECTION_LOST, SourceConnectionError, True),
    (err.OperationalError(2006, "MySQL server has gone away"),
     Failure.CONNECTION_LOST, SourceConnectionError, True),
    (err.OperationalError(2013, "Lost connection to MySQL server during query"),
     Failure.CONNECTION_LOST, SourceConnectionError, True),
    (err.OperationalError(1053, "Server shutdown in progress"),
     Failure.CONNECTION_LOST, SourceConnectionError, True),
    (err.OperationalError(1927, "Connection was killed"),
     Failure.CONNECTION_LOST, SourceConnectionError, True),
    (err.OperationalError(1040, "Too many connections"),
     Failure.CONNECTION_LOST, SourceConnectionError, True),
    (err.InterfaceError(0, ""), Failure.CONNECTION_LOST, SourceConnectionError, True),
    (err.InternalError(4, "Packet sequence number wrong"),
     Failure.CONNECTION_LOST, SourceConnectionError, True),
    (ConnectionResetError(104, "Connection reset by peer"),
     Failure.CONNECTION_LOST, SourceConnectionError, True),
    (EOFError(), Failure.CONNECTION_LOST, SourceConnectionError, True),
    (struct.error("unpack requires a buffer of 4 bytes"),
     Failure.CONNECTION_LOST, SourceConnectionError, True),
    (StreamLostError("binlog connection lost"),
     Failure.CONNECTION_LOST, SourceConnectionError, True),
    (err.OperationalError(1205, "Lock wait timeout exceeded; try restarting transaction"),
     Failure.LOCK_WAIT, SourceConnectionError, True),
    (err.OperationalError(1213, "Deadlock found when trying to get lock"),
     Failure.LOCK_WAIT, SourceConnectionError, True),
    (err.ProgrammingError(1146, "Table 'shop.items' doesn't exist"),
     Failure.MISSING_TABLE, SourceTableMissingError, False),
    (err.OperationalError(1049, "Unknown database 'shop'"),
     Failure.MISSING_TABLE, SourceTableMissingError, False),
    (err.OperationalError(1054, "Unknown column 'name' in 'field list'"),
     Failure.CHANGED_COLUMNS, SourceTableChangedError, True),
    (err.OperationalError(1142, "SELECT command denied to user 'cdc'@'h' for table 'items'"),
     Failure.MISSING_PRIVILEGE, SourceSettingsError, False),
    (err.OperationalError(1227, "Access denied; you need (at least one of) the REPLICATION "
     "CLIENT privilege(s) for this operation"),
     Failure.MISSING_PRIVILEGE, SourceSettingsError, False),
    (err.OperationalError(4052, "A slave with the same server_uuid/server_id as this slave has "
     "connected to the master"), Failure.SERVER_ID_CONFLICT, ServerIdConflictError, False),
    (err.OperationalError(1236, "A replica with the same server_uuid/server_id as this replica "
     "has connected to the source"), Failure.SERVER_ID_CONFLICT, ServerIdConflictError, False),
    (err.OperationalError(1236, "Could not find first log file name in binary log index file"),
     Failure.BINLOG_GAP, BinlogGapError, False),
    (err.OperationalError(1236, "Could not find GTID state requested by slave in any binlog "
     "files. Probably the slave state is too old and required binlog files have been purged."),
     Failure.BINLOG_GAP, BinlogGapError, False),
    (err.OperationalError(1236, "Client requested master to start replication from impossible "
     "position; the first event 'b.000001' at 5, the last event read from 'b.000001' at 4"),
     Failure.BINLOG_GAP, BinlogGapError, False),
    (err.OperationalError(1236, "bogus data in log event; the first event 'b.000001' at 300"),
     Failure.BINLOG_READ, BinlogReadError, False),
    (err.OperationalError(2026, "SSL is required but the server doesn't support it"),
     Failure.TLS, SourceSettingsError, False),
    (err.OperationalError(2003, "Can't connect to MySQL server on '10.0.0.5' ([SSL: "
     "CERTIFICATE_VERIFY_FAILED] certificate verify failed: self-signed certificate)"),
     Failure.TLS, SourceSettingsError, False),
    (ssl.SSLCertVerificationError(1, "certificate verify failed: IP address mismatch"),
     Failure.TLS, SourceSettingsError, False),
    (err.ProgrammingError(1064, "You have an error in your SQL syntax"),
     Failure.REFUSED, SourceError, False),
    (err.OperationalError(4025, "CONSTRAINT `c` failed for `shop`.`items`"),
     Failure.REFUSED, SourceError, False),
]  # fmt: skip


def _server(**options: object) -> SourceServer:
    config = SourceConfig(
        host="db.example", port=3307, user="cdc", password_env="CDC_PW", server_id=77
    )
    return SourceServer(config, SECRET, **options)


@pytest.mark.parametrize(("exc", "failure", "kind", "transient"), CASES)
def test_every_library_error_has_one_engine_error(
    exc: BaseException, failure: Failure, kind: type[SourceError], transient: bool
) -> None:
    assert classify(exc) is failure
    for error in (translate(exc, "reading", _server()), mysql_error(exc, "snapshot")):
        assert type(error) is kind
        assert error.transient is transient
    assert SECRET not in str(translate(exc, "reading", _server()))


def test_messages_name_the_server_and_the_fix() -> None:
    server = _server(grants="run GRANT SELECT ON *.* TO 'cdc'@'%'")
    denied = server.error(err.OperationalError(1045, "Access denied for user 'cdc'"), "checking")
    assert str(denied).startswith("access denied checking db.example:3307 as 'cdc': error 1045")
    assert "check the user and the password in $CDC_PW" in str(denied)
    lost = server.error(err.OperationalError(2013, "Lost connection"), "connecting to")
    assert str(lost).startswith("cannot reach MySQL/MariaDB connecting to db.example:3307")
    grant = server.error(err.OperationalError(1142, "SELECT command denied"), "reading")
    assert "user 'cdc' lacks a privilege" in str(grant)
    assert str(grant).endswith("run GRANT SELECT ON *.* TO 'cdc'@'%'")
    host = server.error(socket.gaierror(-2, "Name or service not known"), "connecting to")
    assert "check source.host" in str(host)


def test_binlog_refusals_name_the_position_and_the_server_id() -> None:
    server = _server()
    start = ResumePosition("b.000003", 4711)
    gap = server.error(
        err.OperationalError(1236, "Could not find first log file name."), "x", start
    )
    assert "no longer has the binlog to read from b.000003:4711" in str(gap)
    assert "take a new snapshot" in str(gap)
    read = server.error(err.OperationalError(1236, "bogus data in log event"), "x", start)
    assert "refused to send its binlog from b.000003:4711" in str(read)
    assert "not the start of an event" in str(read)
    assert "take a new snapshot" not in str(read)
    conflict = server.error(err.OperationalError(4052, "same server_id"), "x")
    assert isinstance(conflict, ServerIdConflictError)
    assert conflict.server_id == 77
    assert "another reader connected with the same server_id 77" in str(conflict)


def test_a_side_reader_names_its_purpose_and_a_stream_counts_unknown_errors_as_lost() -> None:
    odd = err.OperationalError(1593, "Fatal error: The slave I/O thread stops")
    side = _server(purpose="snapshot").error(odd, "reading")
    assert type(side) is SourceError
    assert str(side).startswith("snapshot: the server refused reading db.example:3307")
    stream = _server(unknown_is_lost=True).error(odd, "streaming the binlog of")
    assert isinstance(stream, SourceConnectionError)
    assert stream.transient


def test_predicates() -> None:
    assert is_missing_table(err.ProgrammingError(1146, "no such table"))
    assert is_missing_table(err.OperationalError(1049, "Unknown database"))
    assert not is_missing_table(err.OperationalError(2013, "Lost connection"))
    assert not is_missing_table(OSError(1146, "not a server error"))
    assert is_missing_privilege(err.OperationalError(1227, "REPLICATION CLIENT"))
    assert not is_missing_privilege(err.OperationalError(1045, "Access denied"))


def test_connections_share_one_context_for_the_default_tls() -> None:
    """pymysql builds a new default TLS context (loading the system's CA certificates, tens
    of ms) for every connection, though that preferred mode verifies nothing: the source's
    connections share one, set as pymysql sets it; explicit TLS options get their own."""
    first = mysql_connection(host="127.0.0.1", defer_connect=True)
    second = mysql_connection(host="127.0.0.1", port=3307, user="x", defer_connect=True)
    assert first.ctx is second.ctx
    assert first.ctx.verify_mode == ssl.CERT_NONE
    assert not first.ctx.check_hostname
    assert not first.ctx.verify_flags & ssl.VERIFY_X509_STRICT
    assert first.ssl  # still preferred (used when the server offers it), not required
    assert not ssl_required(first)
    verified = mysql_connection(host="127.0.0.1", defer_connect=True, ssl_verify_cert=True)
    assert verified.ctx is not first.ctx
    assert verified.ctx.verify_mode == ssl.CERT_REQUIRED
