"""The id watch's cleanup: rows marked deleted and expired are deleted in bounded batches.

After each list, when a table has ``expire``: rows marked deleted and not modified for
``after_seconds`` are deleted in batches of ``batch_size``, at most ``max_batches_per_round``
per round; each batch's keys are re-read at once, so its deletes reach the change log in the
same transaction instead of waiting for the next list (docs/id_watch.md).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Sequence
from datetime import timedelta

from cdc_platform.events import ChangeEvent, Op
from cdc_platform.source.id_watch.emitter import Emitter
from cdc_platform.source.id_watch.state import Change, KnownState
from cdc_platform.source.id_watch.tables import WatchedTable, db_now, key_json
from cdc_platform.source.mysql import Connection
from cdc_platform.source.reading.row_reader import select_rows
from cdc_platform.source.sql import quote_identifier

__all__ = ["ExpiredRows"]

log = logging.getLogger("cdc_platform.source.id_watch.watch")


class ExpiredRows:
    """The cleanup of one id watch source; ``stop`` ends a round between batches."""

    def __init__(self, stop: threading.Event) -> None:
        self._stop = stop
        self.deleted = 0
        """Rows deleted so far."""

    def run(
        self,
        conn: Connection,
        tables: Sequence[WatchedTable],
        known: KnownState,
        emitter: Emitter,
    ) -> Iterator[ChangeEvent]:
        """Delete expired rows in bounded batches; each batch's keys are re-read at once and
        the difference (normally all deletes) is one transaction."""
        for table in tables:
            expire = table.settings.expire
            if expire is None:
                continue
            spec = table.spec
            key_sql = ", ".join(quote_identifier(k) for k in spec.primary_key)
            deleted_col = quote_identifier(expire.deleted_column)
            where = f"{deleted_col} = 1 AND {quote_identifier(expire.modified_column)} < %s"
            now_local, now_utc = db_now(conn)
            now = now_utc if table.modified_type == "timestamp" else now_local
            cutoff = now - timedelta(seconds=expire.after_seconds)
            for _ in range(expire.max_batches_per_round):
                if self._stop.is_set():
                    return
                target = f"{quote_identifier(spec.db)}.{quote_identifier(spec.table)}"
                with conn.cursor() as cur:
                    cur.execute(
                        f"SELECT {key_sql} FROM {target} WHERE {where} "  # noqa: S608 (identifiers quoted by the source's quoting, values bound as parameters)
                        f"ORDER BY {key_sql} LIMIT {int(expire.batch_size)}",
                        (cutoff,),
                    )
                    keys = [list(r) for r in cur.fetchall()]
                    if not keys:
                        break
                    marks = "(" + ", ".join(["%s"] * len(spec.primary_key)) + ")"
                    in_list = ", ".join([marks] * len(keys))
                    # The expiry condition again: a row refreshed since the SELECT stays.
                    deleted = cur.execute(
                        f"DELETE FROM {target} WHERE {where} "  # noqa: S608 (identifiers quoted by the source's quoting, values bound as parameters)
                        f"AND ({key_sql}) IN ({in_list})",
                        (cutoff, *(v for key in keys for v in key)),
                    )
                self.deleted += deleted
                present = select_rows(
                    conn,
                    spec,
                    quote_identifier(table.settings.id_column),
                    f"WHERE ({key_sql}) IN ({in_list})",
                    tuple(v for key in keys for v in key),
                )
                last = emitter.last_ids[table.name]
                here = {pk for pk, _, _ in present}
                rows = [(pk, image) for pk, image, extra in present if int(extra[0]) <= last]
                wanted = {key_json(spec, key) for key in keys}
                changes = known.diff(table.name, rows, new_op=Op.SNAPSHOT)
                changes += [
                    Change(Op.DELETE, pk, None)
                    for pk in sorted(wanted - here)
                    if pk in known.table(table.name)
                ]
                if changes:
                    yield from emitter.transaction(table, changes)
                    known.apply(table.name, changes)
                log.info("id_watch: cleanup deleted %d expired rows of %s", deleted, table.name)
                if len(keys) < expire.batch_size:
                    break
