"""The engine's one error hierarchy.

Library errors (pymysql, pymysqlreplication, kazoo, deltalake, pydantic) are caught where the
library is called and re-raised as one of these, so everything above sees the engine's own
errors. Each class says whether a retry can help (``transient``) and keeps its inputs as
attributes so callers and tests can act on them without parsing messages.
"""

from __future__ import annotations

__all__ = [
    "BinlogGapError",
    "BinlogReadError",
    "CdcError",
    "CheckpointError",
    "CommitRefusedError",
    "ConfigError",
    "ConfigFileError",
    "LakeAccessError",
    "LeaseBackendError",
    "LeaseError",
    "LeaseLostError",
    "MirrorError",
    "ReconcileError",
    "ResumeMismatchError",
    "ServerIdConflictError",
    "SinkError",
    "SnapshotError",
    "SourceConnectionError",
    "SourceError",
    "SourceLoginError",
    "SourceServerChangedError",
    "SourceSettingsError",
    "SourceTableChangedError",
    "SourceTableMissingError",
    "SparkError",
    "SparkSessionError",
    "StaleSideFileError",
    "StartPositionError",
    "StoreError",
    "TooFarBehindError",
    "UnknownPositionError",
    "UnsupportedColumnTypeError",
    "WatchError",
]


class CdcError(Exception):
    """Root of every error the engine raises on purpose."""

    transient: bool = False
    """True when retrying the same operation later may succeed."""


class ConfigError(CdcError):
    """Configuration that cannot be used."""


class ConfigFileError(ConfigError):
    """One configuration file is invalid; names the file, the key path and the problem."""

    def __init__(self, path: str, key: str, problem: str) -> None:
        self.path = path
        self.key = key
        self.problem = problem
        where = f"{path}: {key}" if key else path
        super().__init__(f"{where}: {problem}")


class SourceError(CdcError):
    """The binlog source cannot go on."""


class SourceSettingsError(SourceError):
    """The server's binlog settings or the user's grants do not allow lossless CDC."""


class BinlogGapError(SourceError):
    """The position to resume from is no longer on the server (purged binlog, GTID gap)."""


class StartPositionError(BinlogGapError):
    """The configured start (``start:`` of instance.yaml) is not in the server's retained
    binlog: a purged file or GTID, a timestamp older than the oldest binlog, a position that is
    not a transaction's start. ``oldest`` names the oldest position the server still has."""

    def __init__(self, message: str, *, oldest: str | None) -> None:
        self.oldest = oldest
        super().__init__(message)


class BinlogReadError(SourceError):
    """The server refused to send its binlog from a position for a reason other than a purge
    (error 1236: an offset that is not the start of an event, a damaged binlog, an event larger
    than max_allowed_packet). The change log may still be continued once the cause is fixed;
    retrying the same read gives the same answer."""


class ServerIdConflictError(SourceError):
    """Another reader connected to the source with this reader's ``server_id``; the server ended
    this dump (MariaDB error 4052, MySQL 1236). Reconnecting would only end the other reader in
    turn: every destination and replica needs its own server_id."""

    def __init__(self, message: str, *, server_id: int) -> None:
        self.server_id = server_id
        super().__init__(message)


class SourceServerChangedError(SourceError):
    """A file/position checkpoint recorded on one server is being resumed on another server (a
    switched primary): a binlog of the same name there holds other transactions. Resume by GTID
    or take a new snapshot; retrying does not help."""

    def __init__(self, message: str, *, recorded: str, found: str) -> None:
        self.recorded = recorded
        self.found = found
        super().__init__(message)


class SourceConnectionError(SourceError):
    """The source server went away or refused the connection; reconnecting may help."""

    transient = True


class SourceLoginError(SourceConnectionError):
    """The server refused the login (wrong user or password, or a missing account): the same
    credentials will be refused again, so this is not retried."""

    transient = False


class SourceTableMissingError(SourceError):
    """A table (or its whole database) read by a side reader no longer exists: dropped or
    renamed since it was listed."""


class SourceTableChangedError(SourceError):
    """A table changed its columns while it was read (a selected column is gone); reading it
    again, with its columns described anew, may succeed."""

    transient = True


class StoreError(CdcError):
    """Misuse of the event store."""


class UnknownPositionError(StoreError):
    """An ack named a position the store never handed out (or already acked)."""


class SinkError(CdcError):
    """The Delta sink could not commit."""

    transient = True


class CommitRefusedError(SinkError):
    """Fencing: the change log already holds this batch or a newer writer; never retry blindly."""

    transient = False


class StaleSideFileError(CommitRefusedError):
    """Fencing of the lake's side files: another writer (a newer lease term) replaced the file
    since this writer read it, so this writer's write (or delete) was refused."""


class LakeAccessError(SinkError):
    """The lake's store cannot be used: unreachable, refused credentials, no bucket, no write
    permission, or no safe concurrent commits. Names the URI and the cause (``cause``)."""

    def __init__(self, uri: str, cause: str, advice: str, *, transient: bool = False) -> None:
        self.uri = uri
        self.cause = cause
        self.transient = transient
        super().__init__(f"lake {uri}: {cause}; {advice}")


class CheckpointError(SinkError):
    """The change log's checkpoint is unreadable or inconsistent."""

    transient = False


class LeaseError(CdcError):
    """The HA lease (ZooKeeper running node or database lease row) cannot be used."""


class LeaseBackendError(LeaseError):
    """The lease store (ZooKeeper, the lease database) failed or is unreachable; retry later."""

    transient = True


class LeaseLostError(LeaseError):
    """This process no longer holds the lease: it must stop writing at once.

    ``reason`` says why (expired, taken over, session lost, released by an operator); the
    holder of ``epoch`` is fenced off and a new term needs a new acquisition.
    """

    def __init__(self, destination: str, epoch: int | None, reason: str) -> None:
        self.destination = destination
        self.epoch = epoch
        self.reason = reason
        term = f" (epoch {epoch})" if epoch is not None else ""
        super().__init__(f"{destination}: lease lost{term}: {reason}")


class WatchError(CdcError):
    """The state watch store failed."""

    transient = True


class TooFarBehindError(WatchError):
    """The events after ``since`` were dropped from the bounded history: re-list, then watch.

    ``oldest`` is the index of the oldest event still kept (0 when none is) and ``current``
    the newest index; a client re-lists (getting the state as of ``current``) and watches on.
    """

    transient = False

    def __init__(self, since: int, oldest: int, current: int) -> None:
        self.since = since
        self.oldest = oldest
        self.current = current
        super().__init__(
            f"watch is too far behind: events after index {since} are no longer kept "
            f"(history holds {oldest}..{current}); re-list and watch from the list's index"
        )


class SnapshotError(CdcError):
    """An initial/on-demand snapshot cannot run as asked: a table without a primary key, a
    column type it cannot read, or a different snapshot already in progress for the
    destination. Names the table or the state file; retrying the same request will not help."""


class SnapshotSpillError(SnapshotError):
    """A whole-table copy could not write its rows to its local spill file (the temporary
    directory is full, missing or not writable). Names the directory; free room there or point
    ``TMPDIR`` elsewhere, then rerun: a retry helps once there is room."""

    transient = True


class SparkError(CdcError):
    """The downstream Spark work (session, mirrors, history) cannot go on."""


class SparkSessionError(SparkError):
    """No Spark session: the embedded engine failed to start, the Spark Connect server is
    unreachable, or classic Spark could not start (e.g. the delta-spark jars cannot be fetched).
    """

    transient = True


class ReconcileError(CdcError):
    """A reconciliation could not compare or repair as asked: no mirror to compare with, the
    lease holder did not take the repair request in time, or a bad request. Names the
    destination and table; nothing wrong was written (repairs re-read the source)."""


class MirrorError(SparkError):
    """Applying the change log to a mirror (or computing history from it) failed in the engine
    or storage; the mirror keeps its last committed state and a rerun resumes from it."""

    transient = True

    def __init__(self, message: str, *, db: str | None = None, table: str | None = None) -> None:
        self.db = db
        self.table = table
        super().__init__(message)


class UnsupportedColumnTypeError(SparkError):
    """A source column has a type the mirror cannot represent; names the column and type."""

    def __init__(self, db: str, table: str, column: str, type_name: str) -> None:
        self.db = db
        self.table = table
        self.column = column
        self.type_name = type_name
        super().__init__(
            f"{db}.{table}.{column}: column type {type_name!r} has no Spark type in the mirror; "
            "exclude the table from the destination or add the type to cdc_platform.spark.types"
        )


class ResumeMismatchError(SourceError):
    """A checkpoint inside a transaction (its first events committed in chunks) does not fit
    what the binlog holds there: another transaction, or table filters that count its events
    differently. Skipping would drop or repeat changes; the message says what to do."""
