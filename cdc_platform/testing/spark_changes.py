"""Hand-made change logs for the Spark tests: a source table modelled in Python.

:class:`SourceTable` keeps the rows a source table would hold and emits the ChangeEvents the
binlog source would (images as JSON text, ``columns`` JSON, DDL statements);
:class:`ChangeLogWriter` commits them to a change-log Delta table with chosen binlog
timestamps and commit times, so tests can place changes on particular days. Rows are written
with the sink's own :func:`~cdc_platform.sink.schema.events_to_table`.
"""

from __future__ import annotations

import base64
import json
import struct
from collections.abc import Sequence
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

import pyarrow as pa
from deltalake import write_deltalake

from cdc_platform.events import (
    BinlogPosition,
    ChangeEvent,
    EventKind,
    Op,
    ResumePosition,
    Transaction,
)
from cdc_platform.sink.schema import PARTITION_COLUMNS, events_to_table, row_events

__all__ = ["ChangeLogWriter", "SourceTable", "column", "expected_row", "expected_value", "float32"]


def column(
    name: str,
    type: str,
    *,
    pk: bool = False,
    unsigned: bool = False,
    precision: int | None = None,
    scale: int | None = None,
    length: int | None = None,
    values: Sequence[str] | None = None,
) -> dict[str, Any]:
    """One entry of the ``columns`` JSON (events.COLUMNS_DOC)."""
    return {
        "name": name,
        "type": type,
        "unsigned": unsigned,
        "precision": precision,
        "scale": scale,
        "length": length,
        "pk": pk,
        "values": list(values) if values is not None else None,
    }


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


class SourceTable:
    """Rows of one source table (values already in the change log's JSON representation)."""

    def __init__(self, db: str, table: str, columns: list[dict[str, Any]]) -> None:
        self.db = db
        self.table = table
        self.columns = [dict(c) for c in columns]
        self.rows: dict[tuple[Any, ...], dict[str, Any]] = {}

    @property
    def key_names(self) -> list[str]:
        """Primary-key column names (every column when none is flagged)."""
        keys = [c["name"] for c in self.columns if c["pk"]]
        return keys or [c["name"] for c in self.columns]

    @property
    def names(self) -> list[str]:
        """Column names in table order."""
        return [c["name"] for c in self.columns]

    def key_of(self, row: dict[str, Any]) -> tuple[Any, ...]:
        """The row's key tuple."""
        return tuple(row[k] for k in self.key_names)

    def _columns_json(self) -> str:
        return _dumps(self.columns)

    def _image(self, row: dict[str, Any]) -> str:
        return _dumps({n: row.get(n) for n in self.names})

    def _pk(self, row: dict[str, Any]) -> str:
        return _dumps({k: row[k] for k in self.key_names})

    def _event(self, op: Op, **images: str | None) -> dict[str, Any]:
        return {
            "kind": EventKind.ROW,
            "db": self.db,
            "table": self.table,
            "op": op,
            "columns": self._columns_json(),
            **images,
        }

    def insert(self, row: dict[str, Any]) -> dict[str, Any]:
        """INSERT; returns the event's fields (ChangeLogWriter adds the positions)."""
        full = {n: row.get(n) for n in self.names}
        key = self.key_of(full)
        if key in self.rows:
            raise ValueError(f"duplicate key {key}")
        self.rows[key] = full
        return self._event(Op.INSERT, pk=self._pk(full), after=self._image(full))

    def update(self, key: tuple[Any, ...], **changes: Any) -> dict[str, Any]:
        """UPDATE one row (the key may change)."""
        old = self.rows.pop(key)
        new = {**old, **changes}
        new_key = self.key_of(new)
        if new_key in self.rows:
            self.rows[key] = old
            raise ValueError(f"duplicate key {new_key}")
        self.rows[new_key] = new
        return self._event(
            Op.UPDATE, pk=self._pk(new), before=self._image(old), after=self._image(new)
        )

    def delete(self, key: tuple[Any, ...]) -> dict[str, Any]:
        """DELETE one row."""
        old = self.rows.pop(key)
        return self._event(Op.DELETE, pk=self._pk(old), before=self._image(old))

    def ddl(self, statement: str) -> dict[str, Any]:
        """Any DDL statement on the table (no effect on the model)."""
        return {
            "kind": EventKind.DDL,
            "db": self.db,
            "table": self.table,
            "op": Op.DDL,
            "ddl": statement,
        }

    def add_column(
        self, spec: dict[str, Any], sql_type: str, after: str | None = None
    ) -> dict[str, Any]:
        """ALTER TABLE ADD COLUMN (existing rows get null)."""
        position = len(self.columns)
        if after is not None:
            position = self.names.index(after) + 1
        self.columns.insert(position, dict(spec))
        for row in self.rows.values():
            row[spec["name"]] = None
        where = f" AFTER `{after}`" if after else ""
        return self.ddl(f"ALTER TABLE `{self.table}` ADD COLUMN `{spec['name']}` {sql_type}{where}")

    def drop_column(self, name: str) -> dict[str, Any]:
        """ALTER TABLE DROP COLUMN."""
        self.columns = [c for c in self.columns if c["name"] != name]
        for row in self.rows.values():
            row.pop(name, None)
        return self.ddl(f"ALTER TABLE `{self.table}` DROP COLUMN `{name}`")

    def rename_column(self, old: str, new: str) -> dict[str, Any]:
        """ALTER TABLE RENAME COLUMN."""
        for c in self.columns:
            if c["name"] == old:
                c["name"] = new
        self.rows = {
            k: {(new if n == old else n): v for n, v in row.items()} for k, row in self.rows.items()
        }
        self.rows = {self.key_of(r): r for r in self.rows.values()}
        return self.ddl(f"ALTER TABLE {self.table} RENAME COLUMN {old} TO {new}")

    def truncate(self) -> dict[str, Any]:
        """TRUNCATE TABLE (no row events, as in the binlog)."""
        self.rows.clear()
        return self.ddl(f"TRUNCATE TABLE `{self.table}`")


class ChangeLogWriter:
    """Commits event dicts from SourceTable as change-log commits (one per call)."""

    def __init__(self, uri: str, *, server_id: int = 1) -> None:
        self.uri = uri
        self.server_id = server_id
        self.seq = 0
        self.batch = 0
        self.pos = 4
        self.gtid = 0

    def commit(
        self, items: Sequence[dict[str, Any]], *, ts: datetime, committed_at: datetime
    ) -> int:
        """Write ``items`` as one commit; each run of row events is one transaction with binlog
        timestamp ``ts``, each DDL its own. Returns the last seq written."""
        events: list[ChangeEvent] = []
        txn: Transaction | None = None
        index = 0
        for item in items:
            if txn is None or item["kind"] is EventKind.DDL:
                self.gtid += 1
                txn = Transaction(
                    start=BinlogPosition("mysql-bin.000001", self.pos),
                    gtid=f"0-{self.server_id}-{self.gtid}",
                    gtid_set_before=None,
                    server_id=self.server_id,
                    timestamp=int(ts.timestamp()),
                )
                index = 0
            self.pos += 100
            fields = dict(item)
            events.append(
                ChangeEvent(
                    txn=txn,
                    position=BinlogPosition("mysql-bin.000001", self.pos),
                    index=index,
                    **fields,
                )
            )
            index += 1
            if item["kind"] is EventKind.DDL:
                txn = None
        rows = row_events(events)
        self.batch += 1
        data = events_to_table(
            rows,
            first_seq=self.seq + 1,
            batch_seq=self.batch,
            epoch=1,
            resume=ResumePosition("mysql-bin.000001", self.pos),
            committed_at=committed_at,
        )
        if "columns" not in data.column_names:  # change logs written before the column existed
            data = data.append_column("columns", pa.array([e.columns for e in rows], pa.string()))
        write_deltalake(self.uri, data, mode="append", partition_by=list(PARTITION_COLUMNS))
        self.seq += len(rows)
        return self.seq


def float32(value: float) -> float:
    """``value`` rounded to the nearest 32-bit float (what a FLOAT column holds)."""
    rounded: float = struct.unpack("<f", struct.pack("<f", value))[0]
    return rounded


def _temporal(text: str, parse: Any) -> Any:
    try:
        return parse(text)
    except ValueError:  # MySQL zero / partial dates: no Spark value
        return None


def expected_value(value: Any, spec: dict[str, Any]) -> Any:  # noqa: PLR0911 (by type)
    """The Python value a mirror column holds for a change-log JSON value (types.md), as
    pyspark returns it (naive UTC datetimes for TIMESTAMP, in a UTC session)."""
    if value is None:
        return None
    kind = spec["type"]
    if kind == "decimal":
        return Decimal(value) if (spec.get("precision") or 10) <= 38 else value
    if kind == "float":
        return float32(float(value))
    if kind == "double":
        return float(value)
    if kind == "bit":
        return int(value, 2)
    if kind == "date":
        return _temporal(value, date.fromisoformat)
    if kind == "datetime":
        return _temporal(value, datetime.fromisoformat)
    if kind == "timestamp":
        parsed = _temporal(value, datetime.fromisoformat)
        return (
            None
            if parsed is None or parsed.tzinfo is None
            else (parsed.astimezone(UTC).replace(tzinfo=None))
        )
    if kind in ("binary", "varbinary", "blob"):
        return base64.b64decode(value)
    if kind in {"json", "geometry"}:
        return _dumps(value) if not isinstance(value, str) or kind == "geometry" else value
    return value


def expected_row(row: dict[str, Any], columns: list[dict[str, Any]]) -> dict[str, Any]:
    """:func:`expected_value` for every column of a row (in table order)."""
    return {c["name"]: expected_value(row.get(c["name"]), c) for c in columns}
