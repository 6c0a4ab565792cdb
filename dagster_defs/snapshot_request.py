"""The `cdc_snapshot_request` job: an ad-hoc snapshot of chosen tables, launched from the UI.

Launch it with run config naming the destination and the tables::

    ops:
      request_snapshot:
        config: {destination: shop, tables: [shop.orders, shop.customers]}

The op writes a snapshot request into the destination's lake folder
(:mod:`cdc_platform.backfill.request_inbox`); the destination's long-lived
``cdc_destination`` run, which holds the lease, picks it up between two batches, copies the
tables through the watermark snapshot while changes keep flowing, and answers. The op waits
for that answer up to ``wait_seconds`` (0: only submit) and fails on a refusal, so the run's
status says how the snapshot went. The long-lived run is never stopped.

``build_definitions`` includes it (it needs the ``platform`` resource, a
:class:`PlatformResource`).
"""

from dagster import Config, Failure, OpExecutionContext, in_process_executor, job, op

from cdc_platform.backfill.request_inbox import snapshot_inbox
from cdc_platform.errors import ConfigError
from cdc_platform.sink.destination_lake import DestinationLake
from dagster_defs.resources import PlatformResource

__all__ = ["SNAPSHOT_REQUEST_JOB", "SnapshotRequestConfig", "snapshot_request_job"]

SNAPSHOT_REQUEST_JOB = "cdc_snapshot_request"


class SnapshotRequestConfig(Config):
    """What to snapshot."""

    destination: str
    """The destination whose running node copies the tables."""
    tables: list[str]
    """`db.table` names the destination captures."""
    wait_seconds: float = 3600.0
    """How long the op waits for the running node's answer (0: submit only)."""


@op(name="request_snapshot", required_resource_keys={"platform"})
def request_snapshot(context: OpExecutionContext, config: SnapshotRequestConfig) -> None:
    """Write the request; wait for the answer (see the module docstring)."""
    platform: PlatformResource = context.resources.platform
    loaded = platform.load()
    destination = loaded.destinations.get(config.destination)
    if destination is None:
        problem = loaded.errors.get(config.destination, "no such destination")
        raise ConfigError(f"{config.destination}: {problem}")
    inbox = snapshot_inbox(DestinationLake.of(loaded, destination.name), destination.config.source)
    request_id = inbox.submit(config.tables, requester=f"dagster:{context.run_id}")
    context.log.info(f"snapshot request {request_id} for {', '.join(config.tables)}")
    if config.wait_seconds <= 0:
        return
    answer = inbox.wait(request_id, config.wait_seconds)
    if answer is None:
        raise Failure(
            f"no answer to snapshot request {request_id} within {config.wait_seconds:g} s: is "
            f"the {destination.name} run live? The request waits for it."
        )
    if answer.error:
        raise Failure(f"snapshot request {request_id} failed: {answer.error}")
    rows = answer.rows
    context.log.info(
        f"snapshot request {request_id} done: "
        + ", ".join(f"{table} {count} rows" for table, count in sorted(rows.items()))
    )


@job(
    name=SNAPSHOT_REQUEST_JOB,
    tags={"cdc/snapshot_request": "true"},
    executor_def=in_process_executor,  # one step: no step subprocess
)
def snapshot_request_job() -> None:
    """Ask a destination's running node for an ad-hoc snapshot of chosen tables."""
    request_snapshot()
