"""Triggers on a destination's change log, run by Airflow's triggerer (asyncio).

* :class:`ChangeLogPositionTrigger`: fires once the change log has committed every change
  before a binlog position (``file:pos``), or reached a Delta version; the deferrable
  :class:`~cdc_airflow.sensors.CdcChangeLogSensor` waits on it.
* :class:`ChangeLogLagTrigger`: fires when the lease holder's published lag is above a budget.
* :class:`ChangeLogCommitTrigger`: an event trigger for an ``AssetWatcher`` on the change-log
  asset: fires on each new commit, so DAGs scheduled on that asset run on new changes.

Each polls the engine (:mod:`cdc_airflow.probes`) in a worker thread, every ``poll_seconds``;
a read that fails (a lake briefly unreachable) is logged and retried on the next poll. Their
serialized form holds no secret: the change log's URI and the lake's non-secret storage
options (``of(configset, destination)`` fills them in), or the conf directory.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any, Self

from airflow.triggers.base import BaseEventTrigger, BaseTrigger, TriggerEvent

from cdc_airflow.probes import ChangeLogHead, change_log_head, lag_seconds, parse_position
from cdc_platform.config import ConfigSet
from cdc_platform.errors import CdcError
from cdc_platform.sink.destination_lake import DestinationLake

__all__ = ["ChangeLogCommitTrigger", "ChangeLogLagTrigger", "ChangeLogPositionTrigger"]

_MODULE = "cdc_airflow.triggers"


class _ChangeLogTrigger(BaseTrigger):
    """What the position and commit triggers share: one destination's change log, polled."""

    def __init__(
        self,
        table_uri: str,
        destination: str,
        storage_options: dict[str, str] | None = None,
        poll_seconds: float = 5.0,
    ) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # BaseTrigger is untyped
        self.table_uri = table_uri
        self.destination = destination
        self.storage_options = storage_options
        self.poll_seconds = poll_seconds

    @classmethod
    def of(cls, configset: ConfigSet, destination: str, **kwargs: Any) -> Self:
        """The trigger on ``destination``'s change log of ``configset``."""
        return cls(
            DestinationLake.of(configset, destination).change_log,
            destination,
            configset.lake.delta_options(),
            **kwargs,
        )

    def _kwargs(self) -> dict[str, Any]:
        return {
            "table_uri": self.table_uri,
            "destination": self.destination,
            "storage_options": self.storage_options,
            "poll_seconds": self.poll_seconds,
        }

    async def _head(self) -> ChangeLogHead | None:
        try:
            return await asyncio.to_thread(
                change_log_head, self.table_uri, self.destination, self.storage_options
            )
        except CdcError as exc:
            self.log.warning("%s: change log not readable (%s); retrying", self.destination, exc)
            return None


class ChangeLogPositionTrigger(_ChangeLogTrigger):
    """Fires when the change log has passed ``position`` (binlog ``file:pos``) and reached
    ``min_version`` (a Delta version), whichever of the two are given."""

    def __init__(
        self,
        table_uri: str,
        destination: str,
        storage_options: dict[str, str] | None = None,
        poll_seconds: float = 5.0,
        *,
        position: str | None = None,
        min_version: int | None = None,
    ) -> None:
        super().__init__(table_uri, destination, storage_options, poll_seconds)
        self.position = position
        self.min_version = min_version
        self._target = parse_position(position) if position is not None else None

    def serialize(self) -> tuple[str, dict[str, Any]]:
        """Class path and keyword arguments: how the triggerer rebuilds it."""
        kwargs = self._kwargs() | {"position": self.position, "min_version": self.min_version}
        return f"{_MODULE}.ChangeLogPositionTrigger", kwargs

    def reached(self, head: ChangeLogHead | None) -> bool:
        """Whether ``head`` satisfies the wait."""
        if head is None:
            return False
        if self._target is not None and not head.passed(self._target):
            return False
        return self.min_version is None or head.version >= self.min_version

    async def run(self) -> AsyncIterator[TriggerEvent]:
        """Poll until reached; one event with the head that reached it."""
        while True:
            head = await self._head()
            if self.reached(head):
                assert head is not None  # reached() is False for None
                yield TriggerEvent({"status": "reached", **head.to_dict()})
                return
            await asyncio.sleep(self.poll_seconds)


class ChangeLogLagTrigger(BaseTrigger):
    """Fires when the destination's capture lag, as its lease holder publishes it in the
    state watch of ``conf_dir``'s platform.yaml, is above ``budget_seconds``."""

    def __init__(
        self, conf_dir: str, destination: str, *, budget_seconds: float, poll_seconds: float = 5.0
    ) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # BaseTrigger is untyped
        self.conf_dir = conf_dir
        self.destination = destination
        self.budget_seconds = budget_seconds
        self.poll_seconds = poll_seconds

    def serialize(self) -> tuple[str, dict[str, Any]]:
        """Class path and keyword arguments: how the triggerer rebuilds it."""
        return f"{_MODULE}.ChangeLogLagTrigger", {
            "conf_dir": self.conf_dir,
            "destination": self.destination,
            "budget_seconds": self.budget_seconds,
            "poll_seconds": self.poll_seconds,
        }

    async def run(self) -> AsyncIterator[TriggerEvent]:
        """Poll the published lag; one event once it exceeds the budget."""
        while True:
            try:
                lag = await asyncio.to_thread(lag_seconds, self.conf_dir, self.destination)
            except CdcError as exc:
                self.log.warning("%s: status not readable (%s); retrying", self.destination, exc)
                lag = None
            if lag is not None and lag > self.budget_seconds:
                yield TriggerEvent(
                    {"status": "lagging", "lag_seconds": lag, "budget_seconds": self.budget_seconds}
                )
                return
            await asyncio.sleep(self.poll_seconds)


class ChangeLogCommitTrigger(_ChangeLogTrigger, BaseEventTrigger):
    """For ``AssetWatcher(name, trigger=ChangeLogCommitTrigger(...))`` on the change-log
    asset: an event for each commit after ``after_version`` (None: after the version found
    when it starts), carrying the new head (version, batch, position)."""

    def __init__(
        self,
        table_uri: str,
        destination: str,
        storage_options: dict[str, str] | None = None,
        poll_seconds: float = 5.0,
        *,
        after_version: int | None = None,
    ) -> None:
        super().__init__(table_uri, destination, storage_options, poll_seconds)
        self.after_version = after_version

    def serialize(self) -> tuple[str, dict[str, Any]]:
        """Class path and keyword arguments: how the triggerer rebuilds it."""
        return f"{_MODULE}.ChangeLogCommitTrigger", self._kwargs() | {
            "after_version": self.after_version
        }

    async def run(self) -> AsyncIterator[TriggerEvent]:
        """Each newer commit seen yields one event (several commits between two polls: one)."""
        seen = self.after_version
        if seen is None:
            start = await self._head()
            seen = start.version if start is not None else -1
        while True:
            head = await self._head()
            if head is not None and head.version > seen:
                seen = head.version
                yield TriggerEvent({"destination": self.destination, **head.to_dict()})
            await asyncio.sleep(self.poll_seconds)
