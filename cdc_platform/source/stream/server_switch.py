"""Whether a resume position may be read on the server now behind the source's address.

A switched primary (a promoted replica behind the same address) has binlog files of the same
names holding other transactions: file/position coordinates recorded on another server are
refused, while a GTID state to resume from continues on the new server.
"""

from __future__ import annotations

import logging

from cdc_platform.errors import SourceServerChangedError
from cdc_platform.events import ResumePosition, ServerIdentity

__all__ = ["check_same_server"]

log = logging.getLogger("cdc_platform.source")


def check_same_server(
    position: ResumePosition,
    recorded: ServerIdentity | None,
    found: ServerIdentity,
    *,
    by_gtid: bool,
    where: str,
) -> None:
    """Check that ``position`` (recorded on ``recorded``) may be read on ``found``, the
    server at ``where``; ``by_gtid``: the stream resumes from its GTID state there.

    Positions recorded before identities were kept (``recorded`` None) are accepted as they
    are.

    Raises:
        SourceServerChangedError: a file/position recorded on another server.
    """
    if recorded is not None and not recorded.same_server(found):
        if not by_gtid:
            raise SourceServerChangedError(
                f"{position.file}:{position.pos} is a position in the binlog of "
                f"{recorded}, but {where} is {found}: the source primary was "
                f"switched, and a binlog of the same name on another server holds other "
                "transactions, so reading it from this position would lose or repeat "
                "changes. To continue on the new server, resume by GTID (source.resume_by: "
                "gtid, MariaDB; the checkpoint's GTID state is "
                f"{position.gtid_set or 'unknown'}), or take a new snapshot "
                "(cdc-platform snapshot); if this is the same server with a new server_id, "
                "reset the checkpoint",
                recorded=str(recorded),
                found=str(found),
            )
        log.warning(
            "the binlog position %s was recorded on %s; %s is %s: continuing there by GTID",
            position,
            recorded,
            where,
            found,
        )
