"""Which files one compaction of the change log merges, read from one snapshot's add actions.

Per ``(db, table)`` partition, the files below the target size are merged into one, when
there are at least two; with a byte cap, the oldest first (by ``seq``) up to the cap, the rest
at the next compaction. A partition with a file that has no ``seq`` statistics is left alone:
its files cannot be put in ``seq`` order.

The merged file's Delta statistics are those of the files it replaces, combined (row counts
and null counts added up, the least minimum and the greatest maximum): it holds exactly their
rows, so they are as exact as theirs, and readers skip it by ``seq`` as they skipped them.
Nothing here reads a data file.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable

__all__ = [
    "MIN_FILES",
    "CompactionPlan",
    "FileGroup",
    "SmallFile",
    "merged_stats",
    "plan_compaction",
    "plan_groups",
]

MIN_FILES = 2
"""A partition needs at least this many small files for a rewrite to pay."""


@dataclass(frozen=True, slots=True)
class SmallFile:
    """One data file a compaction replaces, as its add action in the snapshot names it."""

    path: str
    """Relative to the table, URI-encoded as in the Delta log."""
    size: int
    rows: int
    first_seq: int
    last_seq: int
    stats: Mapping[str, Any]
    """Its statistics: ``min``, ``max`` and ``null_count``, each by column name."""


@dataclass(frozen=True, slots=True)
class FileGroup:
    """The small files of one partition that become one file, in ``seq`` order."""

    db: str | None
    table: str | None
    files: tuple[SmallFile, ...]

    @property
    def rows(self) -> int:
        return sum(f.rows for f in self.files)

    @property
    def partition_values(self) -> dict[str, str | None]:
        return {"db": self.db, "table": self.table}

    def stats(self) -> str:
        """The Delta statistics (JSON) of the merged file (see the module docstring)."""
        return merged_stats(self.files)


@dataclass(frozen=True, slots=True)
class CompactionPlan:
    """What one compaction merges, planned from one snapshot (``version``) of the change log."""

    version: int
    groups: tuple[FileGroup, ...]

    @property
    def files(self) -> int:
        """Small files the plan merges."""
        return sum(len(g.files) for g in self.groups)

    @property
    def rows(self) -> int:
        return sum(g.rows for g in self.groups)


def plan_compaction(
    table: DeltaTable, target_size: int | None, max_bytes: int | None = None
) -> CompactionPlan | None:
    """The groups of the partitions with at least two files below ``target_size``; None if none.

    ``target_size`` None uses the table's ``delta.targetFileSize`` (100 MB by default);
    ``max_bytes`` caps the small files one compaction merges (see :func:`plan_groups`).
    """
    version = table.version()
    actions = pa.table(table.get_add_actions(flatten=False)).to_pylist()
    size = target_size or _table_target_size(table)
    groups = plan_groups(actions, size, max_bytes)
    if not groups:
        return None
    return CompactionPlan(version=version, groups=tuple(groups))


def plan_groups(
    actions: Iterable[Mapping[str, Any]], target_size: int, max_bytes: int | None = None
) -> list[FileGroup]:
    """Per partition, its small files in ``seq`` order (pure: one add action per item, as
    ``get_add_actions(flatten=False)`` gives them).

    With ``max_bytes``, one compaction takes the oldest small files up to that many bytes in
    all (at least two, so it always progresses); the rest wait for the next one. That bounds
    the time a compaction adds to its commit (the stream waits for it), e.g. after a snapshot's
    large chunk commits.
    """
    small: dict[tuple[str | None, str | None], list[SmallFile]] = defaultdict(list)
    unplaceable: set[tuple[str | None, str | None]] = set()
    for action in actions:
        partition = action.get("partition") or {}
        key = (partition.get("db"), partition.get("table"))
        low = (action.get("min") or {}).get("seq")
        high = (action.get("max") or {}).get("seq")
        if low is None or high is None or action.get("num_records") is None:
            unplaceable.add(key)
            continue
        if int(action["size_bytes"]) < target_size:
            stats = {name: action.get(name) or {} for name in ("min", "max", "null_count")}
            small[key].append(
                SmallFile(
                    path=str(action["path"]),
                    size=int(action["size_bytes"]),
                    rows=int(action["num_records"]),
                    first_seq=int(low),
                    last_seq=int(high),
                    stats=stats,
                )
            )
    candidates = sorted(
        (
            (key, sorted(files, key=lambda f: f.first_seq))
            for key, files in small.items()
            if len(files) >= MIN_FILES and key not in unplaceable
        ),
        key=lambda candidate: candidate[1][0].first_seq,
    )
    budget = max_bytes
    groups = []
    for (db, name), files in candidates:
        taken = files
        if budget is not None:
            taken = _within(files, budget)
            if len(taken) < MIN_FILES:
                break
            budget -= sum(f.size for f in taken)
        groups.append(FileGroup(db, name, tuple(taken)))
    return groups


def _within(files: list[SmallFile], budget: int) -> list[SmallFile]:
    """The first ``files`` (in seq order) whose sizes fit ``budget``; the first two always,
    when the budget still has room."""
    taken: list[SmallFile] = []
    used = 0
    for item in files:
        if len(taken) >= MIN_FILES and used + item.size > budget:
            break
        if len(taken) < MIN_FILES and used >= budget:
            break
        taken.append(item)
        used += item.size
    return taken


def merged_stats(files: Iterable[SmallFile]) -> str:
    """Delta statistics (``numRecords``, ``minValues``, ``maxValues``, ``nullCount``) of one
    file holding exactly the rows of ``files``.

    A column keeps a minimum (maximum) only when every file has one or holds only nulls in
    it, and a null count only when every file has one: a bound left out only costs skipping.
    """
    files = list(files)
    lows: dict[str, Any] = {}
    highs: dict[str, Any] = {}
    nulls: dict[str, int] = {}
    names = {name for f in files for part in f.stats.values() for name in part}
    for name in sorted(names):
        counts = [f.stats["null_count"].get(name) for f in files]
        if all(c is not None for c in counts):
            nulls[name] = sum(int(c) for c in counts)
        low = _combine([(f, f.stats["min"].get(name)) for f in files], name, min)
        high = _combine([(f, f.stats["max"].get(name)) for f in files], name, max)
        if low is not None:
            lows[name] = low
        if high is not None:
            highs[name] = high
    stats = {
        "numRecords": sum(f.rows for f in files),
        "minValues": lows,
        "maxValues": highs,
        "nullCount": nulls,
    }
    return json.dumps(stats, separators=(",", ":"), ensure_ascii=False)


def _combine(values: list[tuple[SmallFile, Any]], name: str, pick: Any) -> Any:
    """The least (``pick=min``) or greatest bound of one column, as JSON; None when a file
    without one may hold values in it."""
    known = []
    for item, value in values:
        if value is None:
            if item.stats["null_count"].get(name) != item.rows:
                return None
            continue
        known.append(value)
    if not known:
        return None
    try:
        return _json_value(pick(known))
    except TypeError:  # values that do not compare or have no JSON form: no bound
        return None


def _json_value(value: Any) -> Any:
    """A statistics value as delta-rs writes it (timestamps in UTC to the millisecond)."""
    if isinstance(value, datetime):
        aware = value.tzinfo is not None
        moment = value.astimezone(UTC) if aware else value
        text = f"{moment.strftime('%Y-%m-%dT%H:%M:%S')}.{moment.microsecond // 1000:03d}"
        return f"{text}Z" if aware else text
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, bool | int | float | str):
        return value
    raise TypeError(f"no statistics form for {type(value).__name__}")


def _table_target_size(table: DeltaTable) -> int:
    configured = table.metadata().configuration.get("delta.targetFileSize")
    return int(configured) if configured else 100 * 1024 * 1024
