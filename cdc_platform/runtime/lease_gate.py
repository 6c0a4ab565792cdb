"""The commit gate of a lease term: every writer calls it right before each Delta commit.

It passes while :meth:`Lease.is_held` is True. While the lease is unconfirmed (ZooKeeper
SUSPENDED) it holds the commit until the lease is confirmed again; once the term is lost
(:attr:`LeaseGate.lost`) or the supervisor stops, it raises LeaseLostError and the writer's
run ends (docs/ha.md: the commit gate).
"""

from __future__ import annotations

import logging
import threading

from cdc_platform.errors import LeaseLostError
from cdc_platform.ha.lease import Lease

__all__ = ["LeaseGate"]

log = logging.getLogger("cdc_platform.runtime")


class LeaseGate:
    """The gate of ``name``'s lease terms; ``stop`` is the supervisor's stop request.

    The supervisor sets :attr:`epoch` on each acquisition and :attr:`lost` when the term is
    lost (clearing it before the next term).
    """

    def __init__(self, name: str, lease: Lease, stop: threading.Event) -> None:
        self.name = name
        self.lease = lease
        self.stop = stop
        self.lost = threading.Event()
        """Set when the current term is lost: no commit passes any more."""
        self.epoch: int | None = None
        """The epoch of the current (or last) term."""
        self._waiting = False

    def __call__(self) -> None:
        """Right before each commit: pass while the lease is held, hold while unconfirmed."""
        lease = self.lease
        if lease.is_held():
            return
        epoch = self.epoch
        if self.lost.is_set() or lease.epoch is None:
            raise LeaseLostError(self.name, epoch, "the lease is no longer held")
        if not self._waiting:
            self._waiting = True
            log.warning(
                "%s: lease not confirmed (epoch %s): holding commits until it is", self.name, epoch
            )
        while True:
            if self.lost.is_set():
                raise LeaseLostError(self.name, epoch, "lost while a commit was waiting")
            if self.stop.is_set():
                raise LeaseLostError(self.name, epoch, "stopping while the lease was unconfirmed")
            if lease.wait_held(0.25):
                self._waiting = False
                log.info("%s: lease confirmed again (epoch %s): committing", self.name, epoch)
                return
