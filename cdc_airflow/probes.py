"""What the sensor and the triggers poll: the change log's head and the destination's lag.

Plain engine reads, called from the triggers' event loop through a worker thread. What a
trigger carries (its serialized form) holds no secret: the change log is read by its URI and
the lake's non-secret storage options (credentials come from the AWS environment), the lag
from the state watch that platform.yaml names.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from cdc_platform.config import load_platform
from cdc_platform.coordination.factory import open_state_store
from cdc_platform.errors import ConfigError
from cdc_platform.events import BinlogPosition
from cdc_platform.sink import DeltaChangeLog
from cdc_platform.watch.keys import status_key

__all__ = ["ChangeLogHead", "change_log_head", "lag_seconds", "parse_position"]


@dataclass(frozen=True, slots=True)
class ChangeLogHead:
    """The newest commit of a destination's change log."""

    version: int
    """Delta version of the table at the checkpoint."""
    batch_seq: int
    last_seq: int
    position: BinlogPosition
    """Binlog position everything before which is committed."""

    def passed(self, position: BinlogPosition) -> bool:
        """Whether every change before ``position`` (a binlog file:pos) is committed."""
        return self.position >= position

    def to_dict(self) -> dict[str, int | str]:
        """JSON-ready form, for trigger events and asset-event extras."""
        return {
            "change_log_version": self.version,
            "batch_seq": self.batch_seq,
            "last_seq": self.last_seq,
            "position": str(self.position),
        }


def parse_position(text: str) -> BinlogPosition:
    """``mariadb-bin.000003:1234`` (as ``SHOW MASTER STATUS`` and ``status`` print it)."""
    file, sep, pos = text.rpartition(":")
    if not sep or not file or not pos.isdigit():
        raise ConfigError(f"not a binlog position (file:pos): {text!r}")
    return BinlogPosition(file, int(pos))


def change_log_head(
    table_uri: str, destination: str, storage_options: Mapping[str, str] | None = None
) -> ChangeLogHead | None:
    """The change log's newest checkpoint; None before its first commit."""
    sink = DeltaChangeLog(table_uri, destination, storage_options=dict(storage_options or {}))
    try:
        checkpoint = sink.recover()
    finally:
        sink.close()
    if checkpoint is None:
        return None
    return ChangeLogHead(
        version=checkpoint.version,
        batch_seq=checkpoint.batch_seq,
        last_seq=checkpoint.last_seq,
        position=checkpoint.resume.binlog_position,
    )


def lag_seconds(conf_dir: str, destination: str) -> float | None:
    """The capture lag the lease holder last published in the state watch, as ``status``
    shows it (None: not known yet)."""
    root = Path(conf_dir)
    store = open_state_store(load_platform(root), root)
    try:
        entry = store.get(status_key(destination))
    finally:
        store.close()
    if entry is None:
        return None
    lag = json.loads(entry.value).get("lag_seconds")
    return float(lag) if lag is not None else None
