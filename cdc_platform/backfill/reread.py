"""Re-reading tables whose rows a DDL changed without row events.

``ALTER TABLE t ADD COLUMN c ... DEFAULT 'red'`` fills every existing row with 'red', and
``MODIFY`` converts every stored value, yet the binlog carries no row event for them
(:mod:`cdc_platform.source.stream.ddl_effects` lists such statements). So the lease holder, once
such a DDL is in the change log, copies the table again with the watermark snapshot
(:class:`~cdc_platform.backfill.snapshot.SnapshotRunner`): its ``r`` rows, ordered after the
DDL, carry the values the server now holds, and the mirror just applies them. Nothing
emulates MySQL's conversions.

The tables waiting for a re-read are kept in ``<lake_root>/<destination>/_reread_tables.json``
(:mod:`.reread_list`), written before the batch holding the DDL is committed (by every
writer's commit, :mod:`.commit`; a batch that then fails costs one needless copy) and emptied
once their copy is done, so a re-read interrupted by a stop, a crash or a lost lease is done
by the next lease holder, and a mirror never sees the DDL before the list names its table. A
table that cannot be copied (dropped or renamed meanwhile) is left out with a warning; a table
without a primary key is copied whole, replacing its mirror (:mod:`.whole_copy`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from cdc_platform.backfill.progress import SnapshotObservers
from cdc_platform.backfill.reread_list import (
    RereadRecord,
    pending_rereads,
    tables_to_reread,
)
from cdc_platform.backfill.snapshot import (
    SnapshotProgress,
    SnapshotResult,
    SnapshotRunner,
)
from cdc_platform.backfill.stop import SideWorkStop
from cdc_platform.errors import SnapshotError
from cdc_platform.sink.term import WriteTerm

__all__ = [
    "RereadRecord",
    "pending_rereads",
    "reread_tables",
    "tables_to_reread",
]

log = logging.getLogger(__name__)

_MAX_ROUNDS = 100
"""Re-read rounds per call at most (DDL arriving faster than tables copy waits for the
next call, after the stream has caught up)."""


def reread_tables(
    term: WriteTerm,
    *,
    on_progress: Callable[[SnapshotProgress], None] | None = None,
    on_runner: Callable[[SnapshotRunner | None], None] | None = None,
    stop: SideWorkStop | None = None,
) -> SnapshotResult | None:
    """Copy every table on the waiting list again, under the caller's lease (``term``);
    ``on_progress`` hears of every chunk, as for any snapshot.

    The runtime must be stopped: the snapshot streams the binlog from the change log's
    checkpoint itself. A snapshot interrupted earlier is finished first (the two share the
    snapshot state file). Returns the last copy's result, None when nothing waited; a stop
    leaves the rest on the list for the next call.
    """
    name = term.destination
    record = RereadRecord(term.layout.reread_tables)
    if not record.load():
        return None
    state_file = term.layout.snapshot_state

    def runner(tables: list[str] | None) -> SnapshotRunner:
        made = SnapshotRunner(
            term,
            state_file,
            tables=tables,
            observers=SnapshotObservers(on_progress=on_progress),
            stop=stop,
        )
        if on_runner is not None:
            on_runner(made)
        return made

    try:
        result: SnapshotResult | None = None
        if state_file.exists():
            log.info("%s: finishing an interrupted snapshot before the re-read", name)
            listed = record.load()
            result = runner(None).run()
            if state_file.exists():
                return result
            record.remove({t: m for t, m in listed.items() if t in result.tables})
        # The copy streams the binlog on: a DDL it passes adds its tables to the list (the
        # commit protocol, .commit), and they are copied in the next round.
        for _ in range(_MAX_ROUNDS):
            waiting = record.load()
            if not waiting:
                break
            refused = runner([]).keyless(list(waiting))
            for table, why in refused.items():
                log.warning("%s: cannot re-read %s after its DDL: %s", name, table, why)
            copy = [t for t in waiting if t not in refused]
            if copy:
                log.info(
                    "%s: re-reading %s after DDL that changed their rows", name, ", ".join(copy)
                )
                try:
                    result = runner(copy).run()
                except SnapshotError:
                    if not runner([]).keyless(copy):
                        raise
                    continue  # a table went away since the check: the next round leaves it out
                if state_file.exists():
                    return result  # stopped: the list keeps them
            record.remove(waiting)
        return result
    finally:
        if on_runner is not None:
            on_runner(None)
