"""Prepared XA transactions of a checkpoint taken on another server (a switched primary).

A checkpoint lists each prepared XA transaction with its group's file/position, to read its
rows again at a restart (:mod:`.xa`). After a failover resumed by GTID, that file/position
belongs to the old server's binlog: on the promoted replica it is another event, or the
middle of one. The group's GTID names it on every server of the topology, so it is looked
up there (:func:`~.start_position.transaction_at`), and the relocated entry is what later
checkpoints list.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from cdc_platform.errors import BinlogGapError
from cdc_platform.events import PreparedXa, ResumePosition, ServerIdentity
from cdc_platform.source.binlog_server import BinlogServer
from cdc_platform.source.mysql_errors import GAP_ADVICE
from cdc_platform.source.stream.start_position import transaction_at
from cdc_platform.source.stream.transactions import TransactionAssembler

__all__ = ["prepared_here", "relocate_held", "relocated_prepared"]

log = logging.getLogger("cdc_platform.source")


def relocated_prepared(
    server: BinlogServer, prepared: tuple[PreparedXa, ...], recorded: ServerIdentity
) -> tuple[PreparedXa, ...]:
    """``prepared`` (recorded on ``recorded``) at their GTIDs' places in ``server``'s binlog.

    Raises:
        BinlogGapError: a transaction has no GTID (listed before GTIDs were kept, or a MySQL
            source) or its group is not in this server's retained binlog; not transient.
    """
    out: list[PreparedXa] = []
    for xa in prepared:
        found = transaction_at(server, xa.gtid) if xa.gtid else None
        if found is None:
            raise BinlogGapError(
                f"XA transaction {xa.xid}, prepared at {xa.file}:{xa.pos} of {recorded} "
                f"(GTID {xa.gtid or 'not recorded'}), is not in the binlog of {server.where()}: "
                "its rows cannot be read again for its XA COMMIT (the new primary needs "
                f"log_slave_updates, and the group must not be purged); {GAP_ADVICE}"
            )
        log.warning(
            "XA transaction %s was prepared at %s:%s on %s; reading it again at its GTID %s, "
            "%s on %s",
            xa.xid,
            xa.file,
            xa.pos,
            recorded,
            xa.gtid,
            found,
            server.where(),
        )
        out.append(replace(xa, file=found.file, pos=found.pos))
    return tuple(out)


def relocate_held(
    server: BinlogServer,
    assembler: TransactionAssembler,
    before: ServerIdentity | None,
    now: ServerIdentity,
) -> bool:
    """After a reconnect that reached another server (``before`` -> ``now``), the assembler's
    pending XA transactions at their places in its binlog (their rows are held already; the
    places are for the checkpoints from here on). True (for the retry loop: done)."""
    if before is not None and not before.same_server(now):
        assembler.relocate_prepared(lambda pending: relocated_prepared(server, pending, before))
    return True


def prepared_here(
    server: BinlogServer, start: ResumePosition, found: ServerIdentity | None
) -> ResumePosition:
    """``start`` with its prepared XA transactions at their places in the binlog of
    ``found``, the server now read (unchanged when the checkpoint was taken there)."""
    recorded = start.server
    if not start.xa_prepared or recorded is None or found is None:
        return start
    if recorded.same_server(found):
        return start
    return replace(start, xa_prepared=relocated_prepared(server, start.xa_prepared, recorded))
