"""Two-phase XA transactions in the binlog: what the assembler keeps between an ``XA PREPARE``
and the ``XA COMMIT`` / ``XA ROLLBACK`` that resolves it.

A prepared transaction is not committed: its rows are held (never streamed, whatever their
size) and come out only with the group of its ``XA COMMIT``, at that group's position, in the
order the server commits; ``XA ROLLBACK`` drops them. Checkpoints list the transactions
prepared before them (:class:`~cdc_platform.events.PreparedXa`), so a restart can read such a
transaction's rows again from its group and still emit them at its commit.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import replace

from cdc_platform.events import BinlogPosition, ChangeEvent, PreparedXa, Transaction
from cdc_platform.source.stream.xa_rows import DEFAULT_XA_MEMORY_BYTES, XaBudget, XaRows

log = logging.getLogger("cdc_platform.source")

__all__ = ["XaAge", "XaState", "aging_prepared", "warn_aging", "xa_statement", "xid_of"]


def xid_of(text: str) -> str:
    """The XID of an XA statement as the server logs it, the same in XA END and XA COMMIT."""
    text = " ".join(text.split())
    if text.upper().endswith(" ONE PHASE"):
        text = text[: -len(" ONE PHASE")]
    return text.rstrip(";").strip()


def xa_statement(sql: str) -> tuple[str, str]:
    """(verb, XID) of an ``XA ...`` statement: ``("COMMIT", "'x1'")``."""
    words = sql.split(None, 2)
    verb = words[1].upper() if len(words) > 1 else ""
    return verb, xid_of(words[2]) if len(words) > 2 else ""


class XaState:
    """The XA side of one stream: prepared transactions with their rows, and whether the open
    group is an XA group (its rows held until XA PREPARE whatever their size)."""

    def __init__(self, pending: tuple[PreparedXa, ...], budget: XaBudget | None = None) -> None:
        self.budget = budget or XaBudget(DEFAULT_XA_MEMORY_BYTES)
        """What the held rows keep in memory together; the rest is spilled (:mod:`.xa_rows`)."""
        self.pending = pending
        """Prepared and not yet resolved as of the last boundary (what a checkpoint lists)."""
        self.hold = False
        """The open group is an XA transaction: hold its rows until its end."""
        self.xid: str | None = None
        """The XID named by the open group's ``XA END``."""
        self._prepared: dict[str, tuple[PreparedXa, XaRows, int]] = {}
        """XID -> (entry, held rows, binlog time of its prepared group)."""

    def new_group(self, *, hold: bool = False) -> None:
        """A group began or ended: forget the XA flags of the previous one."""
        self.hold = hold
        self.xid = None

    def adopt(self, xa: PreparedXa, rows: XaRows, prepared_at: int) -> None:
        """Rows of a transaction prepared before the stream's start, read again."""
        self._drop(xa.xid)
        self._prepared[xa.xid] = (xa, rows, prepared_at)

    def rows_of(self, xid: str) -> XaRows | None:
        """The held rows of a prepared transaction, if this stream knows it."""
        found = self._prepared.get(xid)
        return None if found is None else found[1]

    def prepared_at(self, xid: str) -> int | None:
        """The binlog time (epoch seconds) of a held transaction's prepared group."""
        found = self._prepared.get(xid)
        return None if found is None else found[2]

    def oldest(self) -> tuple[str, int] | None:
        """(XID, binlog time) of the longest-prepared transaction held, if any."""
        held = [(at, xid) for xid, (_, _, at) in list(self._prepared.items())]
        return None if not held else (min(held)[1], min(held)[0])

    def relocate(self, moved: tuple[PreparedXa, ...]) -> None:
        """The pending transactions' groups at their places in another server's binlog (the
        stream went on there by GTID), so that later checkpoints name those places."""
        by_xid = {xa.xid: xa for xa in moved}
        self.pending = tuple(by_xid.get(xa.xid, xa) for xa in self.pending)
        for xid, (entry, rows, at) in list(self._prepared.items()):
            self._prepared[xid] = (by_xid.get(xid, entry), rows, at)

    def _drop(self, xid: str) -> None:
        found = self._prepared.pop(xid, None)
        if found is not None:
            found[1].close()

    def prepare(self, txn: Transaction, rows: list[ChangeEvent] | XaRows, event_xid: str) -> None:
        """The open group ``txn`` ended with XA PREPARE: hold ``rows`` under its XID (from its
        XA END, else the event's) and list it as pending from here on."""
        xid = self.xid if self.xid is not None else xid_of(event_xid)
        entry = PreparedXa(xid, txn.start.file, txn.start.pos, txn.gtid)
        self._drop(xid)
        held = rows if isinstance(rows, XaRows) else XaRows(self.budget, rows)
        self._prepared[xid] = (entry, held, txn.timestamp)
        self.pending = (*(x for x in txn.xa_prepared if x.xid != xid), entry)

    def boundary(self, txn: Transaction) -> None:
        """``txn`` ended: what is pending after it; a resolved transaction is forgotten."""
        self.pending = txn.xa_prepared_after
        if txn.xa_resolves is not None:
            self._drop(txn.xa_resolves)

    @staticmethod
    def committed(
        rows: Iterable[ChangeEvent], txn: Transaction, here: BinlogPosition, skip: int
    ) -> list[ChangeEvent]:
        """The prepared ``rows`` as rows of the committing group ``txn`` at ``here`` (the
        first ``skip`` were committed before a restart)."""
        return [
            replace(row, txn=txn, position=here, index=i) for i, row in enumerate(rows) if i >= skip
        ]


def aging_prepared(prepared: tuple[PreparedXa, ...], logs: list[str]) -> list[PreparedXa]:
    """The prepared transactions whose group lies in the oldest binlog the server still has
    (``logs``, oldest first): the server's next purge takes it, and then a restart cannot read
    their rows again (a gap) while they stay prepared."""
    if not logs:
        return []
    return [xa for xa in prepared if xa.file == logs[0]]


def warn_aging(prepared: tuple[PreparedXa, ...], logs: list[str], where: str) -> None:
    """Say loudly when a prepared XA transaction's group is in the oldest retained binlog
    (:func:`aging_prepared`) of the server at ``where``: someone must commit or roll it back
    before it is purged."""
    for xa in aging_prepared(prepared, logs):
        log.warning(
            "XA transaction %s, prepared at %s:%s and still not committed or rolled back, "
            "is in the oldest binlog %s retains: once it is purged this destination cannot "
            "restart (its rows are read again from there); resolve it on the server (XA "
            "RECOVER, then XA COMMIT or XA ROLLBACK) or keep the binlogs longer",
            xa.xid,
            xa.file,
            xa.pos,
            where,
        )


_RETENTION_RETRY_SECONDS = 60.0


class XaAge:
    """How long the oldest held prepared transaction has waited, with a warning once per
    transaction when it has lived half the server's binlog retention: after the purge of its
    group a restart cannot read its rows again."""

    def __init__(self, retention: Callable[[], float | None], where: Callable[[], str]) -> None:
        """``retention``: the server's binlog retention in seconds (0: for ever; None: it
        could not be asked), asked when a transaction is first held, cached once known and
        asked again at most once a minute until then (the server may be down)."""
        self._retention = retention
        self._known: float | None = None
        self._asked_at = float("-inf")
        self._where = where
        self._warned: set[str] = set()

    def age(self, oldest: tuple[str, int] | None, now: float) -> float | None:
        """Seconds since ``oldest`` (XID, binlog time) was prepared; None without one."""
        if oldest is None:
            return None
        xid, prepared_at = oldest
        age = max(0.0, now - prepared_at)
        if self._known is None and now - self._asked_at >= _RETENTION_RETRY_SECONDS:
            self._asked_at = now
            self._known = self._retention()
        retention = self._known
        if retention and age >= retention / 2 and xid not in self._warned:
            self._warned.add(xid)
            log.warning(
                "XA transaction %s has been prepared for %.0f s, half or more of the binlog "
                "retention of %s (%.0f s): once its group is purged this destination cannot "
                "restart; resolve it on the server (XA RECOVER, then XA COMMIT or XA ROLLBACK) "
                "or keep the binlogs longer",
                xid,
                age,
                self._where(),
                retention,
            )
        return age
