"""What the transaction assembler refuses in a binlog stream, and the errors that say why.

Each check raises the error a reader of the stream acts on: settings the source cannot
capture under (compressed events, statement-based DML, partial JSON images), a binlog that
is not the one a checkpoint was taken from, or an incident the server logged.
"""

from __future__ import annotations

from cdc_platform.errors import ResumeMismatchError, SourceError, SourceSettingsError
from cdc_platform.events import BinlogPosition, ResumePosition
from cdc_platform.source.filters import Statement, TableFilter
from cdc_platform.source.mysql_errors import GAP_ADVICE

__all__ = [
    "ANONYMOUS_GTID_EVENT",
    "check_resume_filters",
    "check_same_transaction",
    "partial_json_error",
    "refuse_statement_dml",
    "refuse_unknown_event",
    "txn_name",
]

_MARIADB_COMPRESSED_EVENTS = frozenset(range(0xA5, 0xAC))
"""QUERY_COMPRESSED and the six *_ROWS_COMPRESSED events (log_bin_compress=ON)."""
_MYSQL_TRANSACTION_PAYLOAD = 0x28
_INCIDENT_EVENT = 0x1A
ANONYMOUS_GTID_EVENT = 0x22


def txn_name(gtid: str | None, start: BinlogPosition) -> str:
    """A transaction as messages name it: its GTID (if any) and start position."""
    return f"{gtid} at {start}" if gtid else f"at {start}"


def check_resume_filters(start: ResumePosition, filters: str | None) -> None:
    """A resume inside a transaction counts its skip under the filters it was taken with."""
    if start.skip_events and start.filters not in (None, filters):
        raise ResumeMismatchError(
            f"the table filters changed (include_tables/exclude_tables) while the "
            f"checkpoint is inside transaction {txn_name(start.txn_gtid, start.binlog_position)}"
            f" with its first {start.skip_events} events committed: the skip counts events "
            "under the old filters; restore the previous filters until that transaction is "
            "complete (the checkpoint's skip_events is 0 again), then change them"
        )


def check_same_transaction(expect: ResumePosition, start: BinlogPosition, gtid: str | None) -> None:
    """The first transaction after a resume inside one must be that transaction."""
    if expect.txn_gtid is not None and gtid is not None:
        same = gtid == expect.txn_gtid
    else:
        same = start == expect.binlog_position
    if not same:
        raise ResumeMismatchError(
            f"the checkpoint is inside transaction "
            f"{txn_name(expect.txn_gtid, expect.binlog_position)} with its first "
            f"{expect.skip_events} events committed, but the binlog there holds "
            f"{txn_name(gtid, start)}: it is not the transaction those events belong to "
            f"(a rewritten binlog, another server or an edited checkpoint); skipping would "
            f"drop changes; {GAP_ADVICE}"
        )


def partial_json_error(here: BinlogPosition) -> SourceSettingsError:
    """MySQL's partial JSON update events carry no full row image."""
    return SourceSettingsError(
        f"partial JSON rows event at {here}: binlog_row_value_options must "
        "be empty for full row images"
    )


def refuse_statement_dml(
    statement: Statement, sql: str, tables: TableFilter, here: BinlogPosition
) -> None:
    """Statement-based DML on a captured table (or one the statement does not name): its rows
    are not in the binlog."""
    if statement.tables and not any(tables.matches(db, t) for db, t in statement.tables):
        return
    raise SourceSettingsError(
        f"statement-based DML at {here} ({sql[:80]!r}): its rows are not in "
        "the binlog; every session must use binlog_format=ROW (a session set "
        "binlog_format=STATEMENT or MIXED); take a new snapshot of the affected tables"
    )


def refuse_unknown_event(event_type: int, here: BinlogPosition) -> None:
    """Events the library does not parse that the source must not pass over: compressed
    events (their rows would be lost) and incidents (the server's binlog has a gap)."""
    if event_type in _MARIADB_COMPRESSED_EVENTS or event_type == _MYSQL_TRANSACTION_PAYLOAD:
        raise SourceSettingsError(
            f"compressed binlog event (type {event_type:#x}) at {here}: set "
            "log_bin_compress=OFF (MariaDB) / binlog_transaction_compression=OFF (MySQL) "
            "and take a new snapshot"
        )
    if event_type == _INCIDENT_EVENT:
        raise SourceError(
            f"the server logged an INCIDENT at {here}: changes may be missing "
            f"from its binlog; {GAP_ADVICE}"
        )
