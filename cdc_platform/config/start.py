"""Where a destination without a checkpoint begins (``start`` in `instance.yaml`)."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, model_validator

from cdc_platform.config.base import ConfigModel

__all__ = ["StartConfig", "StartMode"]

_MARIADB_GTID = re.compile(r"^\d+-\d+-\d+(,\d+-\d+-\d+)*$")
_MYSQL_GTID = re.compile(
    r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
    r"(:\d+(-\d+)?)+(,[0-9a-fA-F-]{36}(:\d+(-\d+)?)+)*$"
)
_UTC_TIMESTAMP = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?Z$")

StartMode = Literal["initial", "latest", "earliest", "position", "gtid", "timestamp"]


class StartConfig(ConfigModel):
    """Where a destination without a checkpoint begins (docs/source.md, "Where a destination
    starts"). Once the change log has a checkpoint, the checkpoint rules."""

    mode: StartMode = "initial"
    """initial: copy every captured table (watermark snapshot), then stream; latest: the
    binlog's current end; earliest: the oldest binlog the server still has; position: ``file``
    and ``pos``; gtid: after the transactions of ``gtid``; timestamp: the first transaction at
    or after ``timestamp``."""
    file: str | None = None
    """mode=position: the binlog file, e.g. `mysql-bin.000042`."""
    pos: int | None = Field(default=None, ge=4)
    """mode=position: the offset of a transaction's first event in ``file``."""
    gtid: str | None = None
    """mode=gtid: the GTID state already captured, in the server's own format (MariaDB
    `domain-server-seq[,...]`, MySQL `uuid:interval[,...]`); reading starts after it."""
    timestamp: str | None = None
    """mode=timestamp: UTC time `YYYY-MM-DDTHH:MM:SS[.ffffff]Z`."""

    @model_validator(mode="after")
    def _mode_fields(self) -> StartConfig:
        wanted = {
            "position": ("file", "pos"),
            "gtid": ("gtid",),
            "timestamp": ("timestamp",),
        }.get(self.mode, ())
        for name in ("file", "pos", "gtid", "timestamp"):
            value = getattr(self, name)
            if name in wanted and value is None:
                raise ValueError(f"mode {self.mode} needs {', '.join(wanted)}; {name} is missing")
            if name not in wanted and value is not None:
                raise ValueError(f"{name} is set but mode is {self.mode}: remove {name}")
        if self.gtid is not None and not (
            _MARIADB_GTID.match(self.gtid) or _MYSQL_GTID.match(self.gtid)
        ):
            raise ValueError(
                f"gtid {self.gtid!r} is neither a MariaDB GTID list (0-1-42[,1-2-7]) nor a "
                "MySQL GTID set (3e11fa47-71ca-11e1-9e33-c80aa9429562:1-42)"
            )
        if self.timestamp is not None and not _UTC_TIMESTAMP.match(self.timestamp):
            raise ValueError(f"timestamp {self.timestamp!r} must be UTC like 2026-11-22T10:00:00Z")
        return self

    def describe(self) -> str:
        """One line for logs, `config check` and `status`: the mode and its values."""
        values = [
            f"{name}={getattr(self, name)}"
            for name in ("file", "pos", "gtid", "timestamp")
            if getattr(self, name) is not None
        ]
        return " ".join([self.mode, *values])
