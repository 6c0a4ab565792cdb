"""The ZooKeeper running node's content and Canal's rules for when a process may grab it.

Pure logic, no ZooKeeper client: :class:`RunningData` is what the ephemeral ``running`` node
holds, :class:`SwitchRules` turns each observation of that node into the time from which this
process may try to create it (at once, after ``switch_delay``, or after a release cool-down).
The switch delay gives a holder that deleted its node but lives on (a graceful stop) the first
chance back; a holder whose ZooKeeper session ended has no such chance to give, so the delay
is waived (:meth:`SwitchRules.holder_session_ended`).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from cdc_platform.infra.clock import Clock

__all__ = ["UNKNOWN_HOLDER", "RunningData", "SwitchRules"]


@dataclass(frozen=True, slots=True)
class RunningData:
    """Content of the running node (Canal's ServerRunningData plus run id and epoch)."""

    address: str
    run_id: str
    active: bool
    epoch: int
    since: float | None = None
    liveness: str | None = None
    """``host:port`` of the holder's liveness listener (:mod:`cdc_platform.ha.liveness`), if
    any; versions before it neither write nor read it."""

    def to_bytes(self) -> bytes:
        """JSON, as stored in the node."""
        return json.dumps(asdict(self), sort_keys=True).encode()

    @classmethod
    def parse(cls, raw: bytes | None) -> RunningData | None:
        """The node's content, or None when it is not ours to understand."""
        if not raw:
            return None
        try:
            data = json.loads(raw)
            return cls(
                address=str(data["address"]),
                run_id=str(data["run_id"]),
                active=bool(data.get("active", True)),
                epoch=int(data["epoch"]),
                since=data.get("since"),
                liveness=data["liveness"] if isinstance(data.get("liveness"), str) else None,
            )
        except (ValueError, KeyError, TypeError):
            return None


UNKNOWN_HOLDER = RunningData(address="?", run_id="?", active=True, epoch=-1)
"""Stands for a running node whose content this version cannot parse: held, by someone."""


class SwitchRules:
    """When this process may try to grab the running node (Canal's rules, as pure logic).

    Fed with every observation of the node (present with data, or absent); answers the
    monotonic time from which a grab may be tried, or None while someone holds it.
    """

    def __init__(
        self, run_id: str, *, switch_delay: float, release_cooldown: float, clock: Clock
    ) -> None:
        self.run_id = run_id
        self.switch_delay = switch_delay
        self.release_cooldown = release_cooldown
        self.clock = clock
        self.holder: RunningData | None = None
        """The last holder seen."""
        self.present: bool | None = None
        """None until the first observation."""
        self.grab_at: float | None = None
        self.released_at: float | None = None

    def observe(self, data: RunningData | None) -> None:
        """The node was seen with ``data`` (present) or absent (None)."""
        now = self.clock.monotonic()
        if data is not None:
            if self.released_at is not None and data.run_id != self.run_id:
                self.released_at = None  # a standby took over: the cool-down did its job
            self.holder = data
            self.present = True
            self.grab_at = None
            return
        if self.present is False:
            return  # still absent: keep the time already decided
        first = self.present is None
        self.present = False
        if self.released_at is not None:
            self.grab_at = self.released_at + self.release_cooldown
        elif first or (self.holder is not None and self.holder.run_id == self.run_id):
            self.grab_at = now  # nobody there at start, or our own node went: at once
        else:
            self.grab_at = now + self.switch_delay

    def holder_session_ended(self) -> None:
        """The last holder's session is known to have ended with its node: grab at once.

        A session that ended cannot come back, so nobody is left to wait for; the delay would
        only lengthen the failover. A release cool-down of our own still applies.
        """
        if self.present is False and self.released_at is None and self.grab_at is not None:
            self.grab_at = min(self.grab_at, self.clock.monotonic())

    def waiting_for_switch_delay(self) -> bool:
        """True while a switch delay (not a cool-down) stands between now and a grab."""
        return (
            self.present is False
            and self.released_at is None
            and self.grab_at is not None
            and self.clock.monotonic() < self.grab_at
        )

    def released_by_operator(self) -> None:
        """This process is giving the node up on an operator's request."""
        self.released_at = self.clock.monotonic()

    def may_grab(self) -> bool:
        """True when the node is known absent and any delay has passed."""
        return self.grab_at is not None and self.clock.monotonic() >= self.grab_at
