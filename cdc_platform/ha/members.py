"""Who takes part in a destination's lease: the holder as the store reports it, the members,
and how a process names itself (an address for people, a run id that tells restarts apart).

Plain values shared by every backend, the node registry and the status views; no store here.
"""

from __future__ import annotations

import json
import os
import socket
import uuid
from dataclasses import asdict, dataclass
from typing import Protocol

__all__ = ["HolderInfo", "MemberInfo", "MemberSource", "default_address", "new_run_id"]


def default_address() -> str:
    """``host:pid``: unique per process even when two processes share a machine."""
    return f"{socket.gethostname()}:{os.getpid()}"


def new_run_id() -> str:
    """A fresh id for one lease object: tells this process apart from an earlier one."""
    return uuid.uuid4().hex[:16]


@dataclass(frozen=True, slots=True)
class HolderInfo:
    """Who holds a destination's lease, as the lease store says."""

    destination: str
    address: str
    run_id: str
    epoch: int
    active: bool
    """False once an operator asked the holder to release (manual switch-over pending)."""
    since: float | None = None
    """Wall-clock seconds when this term began (ZooKeeper) or was last renewed (database,
    on the database's clock: ``locked_time``)."""
    expires_at: float | None = None
    """Store-clock expiry of a database lease; None for ZooKeeper (bound to the session)."""
    backend: str = ""

    def to_json(self) -> str:
        """Compact JSON, for the state watch and ``status --json``."""
        return json.dumps(asdict(self), sort_keys=True)


@dataclass(frozen=True, slots=True)
class MemberInfo:
    """A process taking part in a destination (active or standby)."""

    address: str
    run_id: str
    since: float | None = None
    last_seen: float | None = None


class MemberSource(Protocol):
    """Something that lists a destination's processes (the node registry)."""

    def members(self, destination: str) -> list[MemberInfo]:
        """Live members of ``destination``."""
        ...
