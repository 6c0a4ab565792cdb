"""Which swaps of an online schema-change tool need no re-read: the mirror follows the shadow.

At ``RENAME TABLE t TO _t_old, _t_new TO t`` the table's rows are the shadow's. When the change
log (with the batch being committed) holds the shadow's whole life, its rows already are the
tool's copy, and the mirror takes them at the swap (:mod:`cdc_platform.spark.swaps`); copying
``t`` again would read the whole table a second time for nothing. Otherwise (the destination
started while the tool was copying) ``t`` is re-read as after any rename (docs/ddl.md).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import pyarrow.compute as pc
from deltalake import DeltaTable

from cdc_platform.errors import SinkError
from cdc_platform.events import ChangeEvent, Op
from cdc_platform.sink.term import WriteTerm
from cdc_platform.source.stream.swaps import ROW_OPS, shadow_streamed, swapped_in_shadow

__all__ = ["followed_swaps"]

log = logging.getLogger(__name__)


def followed_swaps(term: WriteTerm, events: Sequence[ChangeEvent]) -> set[str]:
    """``db.table`` names a swap among ``events`` gives a shadow's rows whose whole life is in
    the change log or earlier in the batch: not to be re-read."""
    followed: set[str] = set()
    for index, event in enumerate(events):
        if event.op is not Op.DDL or event.ddl is None:
            continue
        shadow = swapped_in_shadow(event.ddl, event.db, event.table)
        if shadow is None:
            continue
        earlier = [
            (str(e.op), e.ddl)
            for e in events[:index]
            if e.op is not None and (e.db, e.table) == (event.db, shadow)
        ]
        if shadow_streamed([*_logged(term, event.db, shadow), *earlier]):
            followed.add(f"{event.db}.{event.table}")
            log.info("%s.%s: swapped in from %s, whose copy streamed: no re-read",
                     event.db, event.table, shadow)  # fmt: skip
    return followed


def _logged(term: WriteTerm, db: str, shadow: str) -> list[tuple[str, str | None]]:
    """The shadow's newest ``CREATE``-bearing DDL rows and one row change after them, as
    ``(op, ddl)`` oldest first (reads only the shadow's partition of the change log)."""
    try:
        delta = DeltaTable(term.layout.change_log, storage_options=term.layout.storage_options)
    except Exception:  # no change log yet (delta-rs raises TableNotFoundError)
        return []
    try:
        data = delta.to_pyarrow_dataset()
        part = (pc.field("db") == db) & (pc.field("table") == shadow)
        ddl = data.to_table(columns=["seq", "ddl"], filter=part & (pc.field("op") == "ddl"))
        rows = sorted(zip(ddl["seq"].to_pylist(), ddl["ddl"].to_pylist(), strict=True))
        found: list[tuple[str, str | None]] = [("ddl", statement) for _, statement in rows]
        newest = rows[-1][0] if rows else -1
        after = part & pc.field("op").isin(sorted(ROW_OPS)) & (pc.field("seq") > newest)
        if data.head(1, columns=["seq"], filter=after).num_rows:
            found.append(("c", None))
    except Exception as exc:  # delta-rs / Arrow errors
        raise SinkError(
            f"reading the rows of {db}.{shadow} in {term.layout.change_log}: {exc}"
        ) from exc
    return found
