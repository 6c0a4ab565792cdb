"""Automatic snapshots of the tables a destination has no complete copy of yet.

The destination's run (``snapshot.new_tables``) calls :func:`snapshot_new_tables` under its
lease before it streams.

``<lake_root>/<destination>/_captured_tables.json`` (format ``v`` 2) keeps

* ``tables``: every table the change log holds completely, by a snapshot or from its
  ``CREATE TABLE`` on; a table is added as soon as its own snapshot finishes, so a later
  interruption does not copy it again;
* ``ended``: tables whose copy was ended or refused, with why (dropped, an unreadable column, or
  renamed while its snapshot was pending);
* ``after_batch`` and ``filters``: the change log's batch and the capture filters when the
  tables were last listed. A table that appears later and whose ``CREATE TABLE`` the log holds
  after that batch was captured from its creation (every row of it is in the log already), so
  it needs no snapshot. The mark is dropped when the filters change: a table excluded for a
  while has a gap the log cannot show.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Sequence

from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError

from cdc_platform.backfill.progress import SnapshotObservers
from cdc_platform.backfill.snapshot import (
    SnapshotProgress,
    SnapshotResult,
    SnapshotRunner,
)
from cdc_platform.backfill.stop import SideWorkStop
from cdc_platform.sink.destination_lake import DestinationLake
from cdc_platform.sink.lake_files import LakeFile
from cdc_platform.sink.start_record import StartRecord
from cdc_platform.sink.table_records import CapturedTables
from cdc_platform.sink.term import WriteTerm
from cdc_platform.source.filters import StatementKind, classify_statement

__all__ = [
    "CapturedTables",
    "created_in_log",
    "current_batch",
    "ddl_logged_after",
    "snapshot_new_tables",
]

log = logging.getLogger(__name__)

_PLAIN_CREATE = re.compile(
    r"\s*CREATE\s+(?:OR\s+REPLACE\s+)?TABLE\s+(?!IF\s+NOT\s+EXISTS\b)", re.IGNORECASE
)
"""A CREATE TABLE that always makes a new table (not TEMPORARY, not IF NOT EXISTS)."""
_KEEPS_TABLE = re.compile(r"\s*(?:ALTER|TRUNCATE)\b", re.IGNORECASE)
_RENAME = re.compile(r"\bRENAME\b", re.IGNORECASE)


def current_batch(term: WriteTerm) -> int:
    """The change log's last batch (0 when it does not exist yet)."""
    lake = term.layout
    try:
        version = DeltaTable(
            lake.change_log, storage_options=lake.storage_options
        ).transaction_version(term.destination)
    except TableNotFoundError:
        return 0
    return int(version or 0)


def created_in_log(lake: DestinationLake, after_batch: int, candidates: Iterable[str]) -> set[str]:
    """The ``candidates`` (``db.table``) whose plain ``CREATE TABLE`` is in the change log after
    ``after_batch`` and not followed by a DROP / RENAME naming them.

    Conservative: any other statement that may name a candidate (DROP, RENAME, a multi-statement
    group, CREATE ... IF NOT EXISTS) counts against it; a candidate wrongly left out is only
    snapshotted once more (its `r` rows repeat the state the log already has).
    """
    import pyarrow.compute as pc  # noqa: PLC0415 (a run without side work never needs it)

    wanted = set(candidates)
    if not wanted:
        return set()
    try:
        delta = DeltaTable(lake.change_log, storage_options=lake.storage_options)
        dataset = delta.to_pyarrow_dataset()
    except TableNotFoundError:
        return set()
    rows = (
        dataset.to_table(
            columns=["db", "ddl", "seq"],
            filter=(pc.field("op") == "ddl") & (pc.field("batch_seq") > after_batch),
        )
        .sort_by("seq")
        .to_pylist()
    )
    created: set[str] = set()
    for row in rows:
        text = str(row["ddl"] or "")
        statement = classify_statement(text, str(row["db"] or ""))
        if statement.kind is not StatementKind.DDL:
            continue
        names = {f"{db}.{table}" for db, table in statement.tables}
        if _PLAIN_CREATE.match(text) and ";\n" not in text and statement.tables:
            db, table = statement.tables[0]
            if f"{db}.{table}" in wanted:
                created.add(f"{db}.{table}")
            continue
        if _KEEPS_TABLE.match(text) and not _RENAME.search(text):
            continue
        for name in list(created):
            table = name.split(".", 1)[1]
            if name in names or table in text:
                created.discard(name)
    return created


def ddl_logged_after(lake: DestinationLake, after_batch: int) -> bool:
    """Whether the change log holds any DDL event in a batch after ``after_batch``."""
    import pyarrow.compute as pc  # noqa: PLC0415 (a run without side work never needs it)

    try:
        delta = DeltaTable(lake.change_log, storage_options=lake.storage_options)
        dataset = delta.to_pyarrow_dataset()
    except TableNotFoundError:
        return False
    found = dataset.count_rows(
        filter=(pc.field("op") == "ddl") & (pc.field("batch_seq") > after_batch)
    )
    return bool(found)


def _nothing_new(term: WriteTerm, record: CapturedTables, state_file: LakeFile) -> bool:
    """True when no table can have become captured since the tables were last listed, so
    the source need not be asked (a term start then does not depend on the source).

    A table that exists now was either listed then, or made captured later by a DDL (CREATE,
    RENAME, ...): every DDL naming a captured table reaches the change log, so a DDL after
    the listing's batch is either in the log (then the source is listed again) or not read
    yet (then the stream captures the table from that DDL on). Filters changed since the
    listing clear ``after_batch``, an interrupted snapshot keeps its state file: both list.
    """
    if not record.exists or record.after_batch is None or state_file.exists():
        return False
    return not ddl_logged_after(term.layout, record.after_batch)


def _record_start_or_adopt(
    term: WriteTerm,
    record: CapturedTables,
    state_file: LakeFile,
    stop: SideWorkStop | None,
    *,
    adopt_existing: bool,
) -> bool:
    """At a first start, record the start; when today's tables are taken as they are (see
    :func:`snapshot_new_tables`), record them and return True: nothing to copy."""
    name, config = term.destination, term.config
    began = current_batch(term)
    chosen_start = config.start.mode not in ("initial", "latest")
    if began == 0 and not chosen_start:
        file = term.layout.start_record
        StartRecord.write(file, config.start, None, epoch=term.epoch)
        return False
    if not (adopt_existing or began == 0) or record.exists or state_file.exists():
        return False
    # began == 0 here: a start at a chosen position (the run pins it next) takes the changes
    # from there, not a copy of today's rows.
    probe = SnapshotRunner(term, state_file, tables=[], stop=stop)
    record.tables = set(probe.captured_tables())
    record.after_batch = began
    record.filters = [list(config.source.include_tables), list(config.source.exclude_tables)]
    record.save()
    log.info(
        "%s: no snapshot (start: %s, change log at batch %d); recording its %d table(s) as "
        "they are",
        name,
        config.start.describe(),
        began,
        len(record.tables),
    )
    return True


def snapshot_new_tables(
    term: WriteTerm,
    *,
    on_progress: Callable[[SnapshotProgress], None] | None = None,
    on_runner: Callable[[SnapshotRunner | None], None] | None = None,
    stop: SideWorkStop | None = None,
    adopt_existing: bool = False,
) -> SnapshotResult | None:
    """Snapshot what the destination does not have a copy of yet, under the caller's lease
    (``term``: its epoch and commit gate; ``stop`` interrupts it when the lease goes).

    The record of copied tables is described in the module docstring. First
    an interrupted snapshot is finished (a table it can no longer copy ends with a reason);
    then every base table the filters match that is neither recorded nor created (``CREATE
    TABLE`` in the change log) since the last listing is snapshotted (all of them at the first
    start). Each table is recorded as soon as its snapshot finishes. Tables without a primary
    key cannot be copied consistently: they are logged and recorded with the reason, so they
    are not retried at each start (their changes are captured from the binlog all the same).
    ``on_runner`` receives the runner while it works (so a stop request can reach it) and
    None afterwards.

    A first start at a chosen position (``start`` mode earliest, position, gtid, timestamp)
    records today's tables without copying them. ``adopt_existing`` (``start: {mode:
    initial}`` without ``snapshot.new_tables``): a
    destination whose change log began before there was a record (it started with another
    start mode, or before start modes existed) is not snapshotted now: its checkpoint rules,
    and the tables it captures today are recorded as they are.

    Returns the last snapshot's result, or None when there was nothing to copy.
    """
    name, config = term.destination, term.config
    state_file = term.layout.snapshot_state
    record = CapturedTables.load(term.layout.captured_tables)
    if _record_start_or_adopt(term, record, state_file, stop, adopt_existing=adopt_existing):
        return None
    source = config.source
    filters = [list(source.include_tables), list(source.exclude_tables)]
    if record.exists and record.filters != filters:
        # Tables excluded until now may have changes the log lacks: no shortcut this time.
        record.after_batch, record.filters = None, filters
        record.save()
    if _nothing_new(term, record, state_file):
        log.info("%s: no DDL since the tables were listed: no new table to snapshot", name)
        return None

    def runner(tables: Sequence[str] | None) -> SnapshotRunner:
        made = SnapshotRunner(
            term,
            state_file,
            tables=tables,
            observers=SnapshotObservers(on_progress=on_progress, on_table_done=record.done),
            stop=stop,
        )
        if on_runner is not None:
            on_runner(made)
        return made

    result: SnapshotResult | None = None
    try:
        if state_file.exists():
            log.info("%s: finishing an interrupted snapshot", name)
            result = runner(None).run()
            if state_file.exists():
                return result  # stopped: finished at the next start
            record.tables |= set(result.tables)  # also those finished before an upgrade
            record.save()
        listed_after = current_batch(term)
        probe = runner([])
        new = sorted(set(probe.captured_tables()) - record.tables)
        if new and record.after_batch is not None:
            created = created_in_log(term.layout, record.after_batch, new)
            if created:
                log.info(
                    "%s: captured from their CREATE TABLE, no snapshot needed: %s",
                    name,
                    ", ".join(sorted(created)),
                )
                record.tables |= created
                new = [t for t in new if t not in created]
        refused = probe.keyless(new)
        for table, why in refused.items():
            log.warning("%s: not snapshotting %s: %s", name, table, why)
            record.ended[table] = why
        copy = [t for t in new if t not in refused]
        if copy:
            log.info("%s: snapshotting %d new table(s): %s", name, len(copy), ", ".join(copy))
            result = runner(copy).run()
            if state_file.exists():
                return result  # stopped: finished at the next start
        record.tables |= set(new)
        record.after_batch, record.filters = listed_after, filters
        record.save()
        return result
    finally:
        if on_runner is not None:
            on_runner(None)
