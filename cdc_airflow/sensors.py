"""``CdcChangeLogSensor``: wait, deferred, for a destination's change log.

It waits until the change log has committed every change before a binlog position (or a
Delta version), or until the destination lags above a budget. Checked once in the worker;
if not yet, the task defers to :mod:`cdc_airflow.triggers` and frees its worker slot while
the triggerer polls. The event's figures are its XCom return value.

How it waits (deferred or in the worker, and how often the change log is read) is one value,
:class:`ChangeLogPolling`; the trigger gets its plain fields, as Airflow keeps a trigger's
arguments as JSON. The wait itself (``position``, ``min_version``) stays in arguments of its
own: they are template fields, rendered into the sensor's attributes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from airflow.sdk import BaseSensorOperator, Context
from airflow.sdk.exceptions import AirflowException

from cdc_airflow.hooks import CdcHook
from cdc_airflow.probes import change_log_head, lag_seconds
from cdc_airflow.triggers import ChangeLogLagTrigger, ChangeLogPositionTrigger
from cdc_platform.errors import CdcError

__all__ = ["CdcChangeLogSensor", "ChangeLogPolling"]


@dataclass(frozen=True, slots=True)
class ChangeLogPolling:
    """How :class:`CdcChangeLogSensor` waits."""

    poll_seconds: float = 5.0
    """How often the trigger reads the change log (or the published lag)."""
    deferrable: bool = True
    """Defer to the triggerer, freeing the worker slot; False: poke in the worker every
    ``poke_interval`` (Airflow's own sensor setting)."""


class CdcChangeLogSensor(BaseSensorOperator):
    """Wait for ``destination``'s change log to pass ``position`` (``file:pos``) and/or reach
    ``min_version``, or (with ``lag_above_seconds``) for its lag to exceed that budget;
    ``polling`` says how (default: deferred, the change log read every 5 s)."""

    template_fields: Sequence[str] = ("destination", "position", "min_version")

    def __init__(
        self,
        *,
        destination: str,
        position: str | None = None,
        min_version: int | None = None,
        lag_above_seconds: float | None = None,
        cdc_conn_id: str = CdcHook.default_conn_name,
        polling: ChangeLogPolling | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        waits = (position is not None or min_version is not None, lag_above_seconds is not None)
        if waits.count(True) != 1:
            raise ValueError("give position and/or min_version, or lag_above_seconds (not both)")
        self.destination = destination
        self.position = position
        self.min_version = min_version
        self.lag_above_seconds = lag_above_seconds
        self.cdc_conn_id = cdc_conn_id
        self.polling = polling or ChangeLogPolling()

    def _trigger(self) -> ChangeLogPositionTrigger | ChangeLogLagTrigger:
        configset = CdcHook(self.cdc_conn_id).load()
        if self.lag_above_seconds is not None:
            return ChangeLogLagTrigger(
                str(configset.conf_dir),
                self.destination,
                budget_seconds=self.lag_above_seconds,
                poll_seconds=self.polling.poll_seconds,
            )
        return ChangeLogPositionTrigger.of(
            configset,
            self.destination,
            position=self.position,
            min_version=None if self.min_version is None else int(self.min_version),
            poll_seconds=self.polling.poll_seconds,
        )

    def poke(self, context: Context) -> bool | Any:
        """One check now (the non-deferrable path, and the first look of the deferrable one)."""
        trigger = self._trigger()
        if isinstance(trigger, ChangeLogLagTrigger):
            lag = lag_seconds(trigger.conf_dir, self.destination)
            return lag is not None and lag > trigger.budget_seconds
        try:
            head = change_log_head(trigger.table_uri, self.destination, trigger.storage_options)
        except CdcError as exc:  # as the trigger does: the next look may read it
            self.log.warning("%s: change log not readable (%s)", self.destination, exc)
            return False
        return trigger.reached(head)

    def execute(self, context: Context) -> Any:  # noqa: RET503 (defer() raises)
        """Done at once if already true; else defer (or poke, when not deferrable)."""
        if not self.polling.deferrable:
            return super().execute(context)
        if self.poke(context):
            return {"status": "reached at first look"}
        self.defer(
            trigger=self._trigger(),
            method_name="execute_complete",
            timeout=timedelta(seconds=self.timeout),
        )

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None) -> Any:
        """The trigger's event, returned as the task's result."""
        if not event:
            raise AirflowException(f"{self.destination}: the trigger ended without an event")
        self.log.info("%s: %s", self.destination, event)
        return event
