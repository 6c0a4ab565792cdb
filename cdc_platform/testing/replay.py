"""Replay a change log by primary key, the ground-truth check of exactly-once delivery."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from deltalake import DeltaTable

__all__ = ["ReplayResult", "RowKey", "has_commits", "replay"]

RowKey = tuple[tuple[str, Any], ...]
"""A row's identity: its primary-key columns and values, in key order."""


@dataclass
class ReplayResult:
    """Current state per table after applying every change in `seq` order."""

    tables: dict[str, dict[RowKey, dict[str, Any]]] = field(default_factory=dict)
    rows: int = 0
    duplicates: list[tuple[Any, ...]] = field(default_factory=list)
    """Change identities (binlog file, position, index in transaction) seen more than once;
    rows a snapshot made (server id 0) have none."""
    seq_gaps: list[tuple[int, int]] = field(default_factory=list)
    """Consecutive seq values that are not consecutive integers."""
    problems: list[str] = field(default_factory=list)
    """Updates or deletes of rows the log never created, and similar impossibilities."""


def _key(pk_columns: list[str], image: dict[str, Any]) -> RowKey:
    return tuple((column, image[column]) for column in pk_columns)


def has_commits(table_uri: str | Path) -> bool:
    """Whether the local Delta table at ``table_uri`` has a commit a reader can open.

    Its ``_delta_log`` directory appears before the first commit file does, so a test waiting
    for the directory alone races its first read ("No files in log segment").
    """
    log = Path(table_uri, "_delta_log")
    return log.is_dir() and any(log.glob("[0-9]*.json"))


def replay(table_uri: str, storage_options: dict[str, str] | None = None) -> ReplayResult:
    """Apply the change log at ``table_uri`` in `seq` order; report duplicates and gaps."""
    table = DeltaTable(table_uri, storage_options=storage_options)
    columns = [
        "op",
        "db",
        "table",
        "pk",
        "before",
        "after",
        "binlog_file",
        "binlog_pos",
        "txn_index",
        "server_id",
        "seq",
    ]
    data = table.to_pyarrow_table(columns=columns).sort_by("seq").to_pylist()
    result = ReplayResult(rows=len(data))
    identities = Counter(
        (row["binlog_file"], row["binlog_pos"], row["txn_index"])
        for row in data
        # rows a snapshot made (op r, and the DDL rows of an empty table's definition or of a
        # whole-table copy: server id 0) sit at their cut, not at an event of their own
        if row["op"] != "r" and row["server_id"] != 0
    )
    result.duplicates = [identity for identity, count in identities.items() if count > 1]
    previous: int | None = None
    for row in data:
        seq = row["seq"]
        if previous is not None and seq != previous + 1:
            result.seq_gaps.append((previous, seq))
        previous = seq
        op = row["op"]
        if op == "ddl":
            continue
        state = result.tables.setdefault(f"{row['db']}.{row['table']}", {})
        pk_columns = list(json.loads(row["pk"]))
        before = json.loads(row["before"]) if row["before"] is not None else None
        after = json.loads(row["after"]) if row["after"] is not None else None
        if op in ("c", "r"):
            assert after is not None
            state[_key(pk_columns, after)] = after
        elif op == "u":
            assert before is not None
            assert after is not None
            old = _key(pk_columns, before)
            if old not in state:
                result.problems.append(f"seq {seq}: update of a row never created: {old}")
            state.pop(old, None)
            state[_key(pk_columns, after)] = after
        elif op == "d":
            assert before is not None
            old = _key(pk_columns, before)
            if state.pop(old, None) is None:
                result.problems.append(f"seq {seq}: delete of a row never created: {old}")
        else:
            result.problems.append(f"seq {seq}: unknown op {op!r}")
    return result
