"""The engine's one error hierarchy.

Library errors (pymysql, pymysqlreplication, kazoo, deltalake, pydantic) are caught where the
library is called and re-raised as one of these, so everything above sees the engine's own
errors. Each class says whether a retry can help (``transient``) and keeps its inputs as
attributes so callers and tests can act on them without parsing messages.
"""

from __future__ import annotations

__all__ = [
    "BinlogGapError",
    "CdcError",
    "CheckpointError",
    "CommitRefusedError",
    "ConfigError",
    "ConfigFileError",
    "SinkError",
    "SourceConnectionError",
    "SourceError",
    "SourceSettingsError",
    "StoreError",
    "UnknownPositionError",
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


class SourceConnectionError(SourceError):
    """The source server went away or refused the connection; reconnecting may help."""

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


class CheckpointError(SinkError):
    """The change log's checkpoint is unreadable or inconsistent."""

    transient = False
