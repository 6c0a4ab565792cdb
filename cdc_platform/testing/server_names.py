"""Server-wide names for tests that share a server, unique per use, and server-wide settings
changed for one test and put back.

The tests of one worker share one MariaDB (tests/conftest.py): each gets its own database, but
an XA transaction's id, an account and a global variable belong to the whole server. Two tests
(or a test and its rerun) with one XID or user name see each other's leftovers: a prepared
transaction that a failed test never ended outlives its connection, holds its row locks, and
makes the next ``XA START`` of that id fail (XAER_DUPID). So each use gets its own name.

A prepared XA transaction also stays bound to the connection that prepared it until the
server has ended that connection: until then other connections get "XAER_NOTA: Unknown XID"
for it (measured: 38 of 300 immediate ``XA COMMIT``\\ s from a new connection on a loaded
machine). :func:`wait_until_disconnected` waits for that hand-over.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from cdc_platform.testing.mariadb import MariaDBServer
from cdc_platform.testing.processes import wait_for

__all__ = ["global_variable", "unique_name", "unique_xid", "wait_until_disconnected", "xid_text"]


def unique_name(prefix: str) -> str:
    """``prefix`` and 10 random hex digits: an account or object name no other test uses
    (at most 32 characters for a ``prefix`` of up to 21, MySQL's user-name limit)."""
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


def unique_xid(label: str) -> str:
    """An XA transaction id (its gtrid) for one test: ``label`` and 10 random hex digits."""
    return f"{label}-{uuid.uuid4().hex[:10]}"


def xid_text(xid: str) -> str:
    """How the engine names the XID ``xid`` (gtrid only, format 1): ``X'<hex>',X'',1``."""
    return f"X'{xid.encode().hex()}',X'',1"


def wait_until_disconnected(server: MariaDBServer, thread: int, timeout: float = 30.0) -> None:
    """Return once the server has ended connection ``thread`` (its ``CONNECTION_ID()``): a
    transaction it prepared can then be committed from any connection."""
    sql = f"SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = {int(thread)}"
    wait_for(
        lambda: not server.query(sql)[0][0],
        f"connection {thread} to end",
        timeout=timeout,
        interval=0.01,
    )


@contextmanager
def global_variable(server: MariaDBServer, name: str, value: str) -> Iterator[None]:
    """``SET GLOBAL name = value`` for the ``with`` block, then the value it had before, also
    when the block fails (``value`` is SQL: quote strings)."""
    if not name.replace("_", "").isalnum():
        raise ValueError(f"not a variable name: {name!r}")
    (before,) = server.query(f"SELECT @@GLOBAL.{name}")[0]
    server.execute(f"SET GLOBAL {name} = {value}")
    try:
        yield
    finally:
        if server.running:
            restore = before if isinstance(before, int) else f"'{before}'"
            server.execute(f"SET GLOBAL {name} = {restore}")
