"""Two-phase XA transactions in the binlog: what the assembler keeps between an ``XA PREPARE``
and the ``XA COMMIT`` / ``XA ROLLBACK`` that resolves it.

A prepared transaction is not committed: its rows are held (never streamed, whatever their
size) and come out only with the group of its ``XA COMMIT``, at that group's position, in the
order the server commits; ``XA ROLLBACK`` drops them. Checkpoints list the transactions
prepared before them (:class:`~cdc_platform.events.PreparedXa`), so a restart can read such a
transaction's rows again from its group and still emit them at its commit.
"""

from __future__ import annotations

from dataclasses import replace

from cdc_platform.events import BinlogPosition, ChangeEvent, PreparedXa, Transaction

__all__ = ["XaState", "aging_prepared", "xa_statement", "xid_of"]


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

    def __init__(self, pending: tuple[PreparedXa, ...]) -> None:
        self.pending = pending
        """Prepared and not yet resolved as of the last boundary (what a checkpoint lists)."""
        self.hold = False
        """The open group is an XA transaction: hold its rows until its end."""
        self.xid: str | None = None
        """The XID named by the open group's ``XA END``."""
        self._prepared: dict[str, tuple[PreparedXa, list[ChangeEvent]]] = {}

    def new_group(self, *, hold: bool = False) -> None:
        """A group began or ended: forget the XA flags of the previous one."""
        self.hold = hold
        self.xid = None

    def adopt(self, xa: PreparedXa, rows: list[ChangeEvent]) -> None:
        """Rows of a transaction prepared before the stream's start, read again."""
        self._prepared[xa.xid] = (xa, rows)

    def rows_of(self, xid: str) -> list[ChangeEvent] | None:
        """The held rows of a prepared transaction, if this stream knows it."""
        found = self._prepared.get(xid)
        return None if found is None else found[1]

    def prepare(self, txn: Transaction, rows: list[ChangeEvent], event_xid: str) -> None:
        """The open group ``txn`` ended with XA PREPARE: hold ``rows`` under its XID (from its
        XA END, else the event's) and list it as pending from here on."""
        xid = self.xid if self.xid is not None else xid_of(event_xid)
        entry = PreparedXa(xid, txn.start.file, txn.start.pos, txn.gtid)
        self._prepared[xid] = (entry, rows)
        self.pending = (*(x for x in txn.xa_prepared if x.xid != xid), entry)

    def boundary(self, txn: Transaction) -> None:
        """``txn`` ended: what is pending after it; a resolved transaction is forgotten."""
        self.pending = txn.xa_prepared_after
        if txn.xa_resolves is not None:
            self._prepared.pop(txn.xa_resolves, None)

    @staticmethod
    def committed(
        rows: list[ChangeEvent], txn: Transaction, here: BinlogPosition, skip: int
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
