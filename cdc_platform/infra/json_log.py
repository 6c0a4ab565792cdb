"""`--log-format json`: one JSON object per log line, for log shippers (docs/operations.md).

The engine logs with the standard library; this formatter only changes how a record is
written. Every object has ``ts`` (UTC, ISO 8601), ``level``, ``logger``, ``destination``
(the record's own, else the ``"<destination>: ..."`` prefix every engine message starts
with, else the formatter's default) and ``event`` (the message); the fields a record carries
in ``extra`` (``position``, ``epoch``, ``batch_seq``, ...) are added as they are. Messages are
the engine's own, which never hold a secret; nothing else of the record is written.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

__all__ = ["FIELDS", "JsonFormatter"]

FIELDS = (
    "destination",
    "position",
    "epoch",
    "batch_seq",
    "lag_seconds",
    "rows_per_second",
    "events_per_second",
    "buffer_fill",
    "reconnects",
)
"""Record attributes (set with ``extra=``) written as fields when present."""


class JsonFormatter(logging.Formatter):
    """Formats each record as one line of JSON; ``destination`` is the default destination
    (`run`'s), used when a record names none."""

    def __init__(self, destination: str | None = None) -> None:
        super().__init__()
        self._destination = destination

    def format(self, record: logging.LogRecord) -> str:
        """One JSON object, no newline inside."""
        message = record.getMessage()
        data: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "destination": self._destination_of(record),
            "event": message,
        }
        for name in FIELDS[1:]:
            value = record.__dict__.get(name)
            if value is not None:
                data[name] = value if isinstance(value, int | float | bool) else str(value)
        if record.exc_info:
            data["exception"] = self.formatException(record.exc_info)
        return json.dumps(data, ensure_ascii=False, default=str)

    def _destination_of(self, record: logging.LogRecord) -> str | None:
        own = record.__dict__.get("destination")
        if own is not None:
            return str(own)
        args = record.args
        if (
            isinstance(record.msg, str)
            and record.msg.startswith("%s: ")
            and isinstance(args, tuple)
            and args
            and isinstance(args[0], str)
        ):
            return args[0]
        return self._destination
