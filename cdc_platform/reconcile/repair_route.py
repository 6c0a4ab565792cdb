"""The repair phase of a reconciliation: the suspected keys are written only under the lease.

If a process holds the destination's lease (the normal run), the suspects go to it through
its request inbox (:mod:`cdc_platform.backfill.request_inbox`) and it writes the repair
events; if nobody holds it, this process takes the lease, repairs, and releases it. If the
holder does not take the request in time, nothing is written and the report says so.
"""

from __future__ import annotations

import logging

from cdc_platform.backfill.repair import RepairResult, RepairTable, repair_keys
from cdc_platform.backfill.request_inbox import repair_inbox
from cdc_platform.backfill.stop import SideWorkStop
from cdc_platform.config.deployment import check_deployment
from cdc_platform.config.loader import ConfigSet
from cdc_platform.config.platform import ReconcileConfig
from cdc_platform.coordination.lease import take_lease
from cdc_platform.ha.lease import Lease
from cdc_platform.sink.destination_lake import DestinationLake
from cdc_platform.sink.term import WriteTerm

__all__ = ["OWN_LEASE_TIMEOUT_SECONDS", "RepairOutcome", "repair_suspects", "repair_with_own_lease"]

log = logging.getLogger(__name__)

OWN_LEASE_TIMEOUT_SECONDS = 10.0
"""How long a reconciliation waits for the free lease it takes to repair under."""

RepairOutcome = tuple[RepairResult | None, str]
"""The repair's result (None: nothing was written) and who repaired, or why not."""


def repair_suspects(
    config: ConfigSet,
    destination: str,
    requests: list[RepairTable],
    settings: ReconcileConfig,
    address: str | None = None,
) -> RepairOutcome:
    """Have ``requests`` repaired where the lease is: by its holder, else under a lease of
    this process (``address``: its name in the lease); see the module docstring."""
    from cdc_platform.coordination.factory import open_lease  # noqa: PLC0415 (kazoo only when used)

    lease = open_lease(config.platform, config.conf_dir, destination, address=address)
    lease.start()
    try:
        holder = lease.holder()
        if holder is None or holder.run_id == lease.run_id:
            return repair_with_own_lease(
                config, destination, requests, lease, OWN_LEASE_TIMEOUT_SECONDS
            )
        source = config.destinations[destination].config.source
        inbox = repair_inbox(DestinationLake.of(config, destination), source)
        request_id = inbox.submit(requests, requester=lease.address)
        log.info(
            "%s: %d suspected keys sent to the lease holder %s (epoch %d), request %s",
            destination,
            sum(len(r.keys) for r in requests),
            holder.address,
            holder.epoch,
            request_id,
        )
        wait_seconds = settings.wait_seconds
        result = inbox.wait(request_id, wait_seconds)
        if result is None:
            return None, (
                f"the lease holder {holder.address} (epoch {holder.epoch}) did not take the "
                f"repair request within {wait_seconds:g} s; nothing was written. Only the "
                "holder may write the change log: is it a `cdc-platform run` / Dagster run "
                "(a snapshot in progress does not take requests)?"
            )
        return result, f"{holder.address} (lease holder)"
    finally:
        lease.close()


def repair_with_own_lease(
    config: ConfigSet,
    destination: str,
    requests: list[RepairTable],
    lease: Lease,
    lease_timeout: float,
) -> RepairOutcome:
    """Nobody streams the destination: take its lease for the repair, then release it.

    Returns the result (None: the lease could not be taken) and who repaired, or why not.
    Refuses, as `run` and `serve` do, a lake on object storage with a local SQLite lease:
    another machine's process would hold its own lease and write the same change log.
    """
    check_deployment(config)
    term = take_lease(
        lease,
        WriteTerm.in_lake(destination, config.destinations[destination].config, config.lake),
        timeout=lease_timeout,
        doing="a reconciliation repair",
    )
    if term is None:
        return None, (
            f"could not take the free lease of {destination} within {lease_timeout:g} s "
            "(someone took it meanwhile); nothing was written"
        )
    stop = SideWorkStop(destination, term.epoch, work="repair")
    lease.on_lost(lambda error: stop.request_stop(f"lease lost: {error.reason}"))
    try:
        result = repair_keys(
            term,
            requests,
            max_backlog_bytes=config.platform.reconcile.max_repair_backlog_bytes,
            stop=stop,
        )
    finally:
        lease.release()
    return result, f"{lease.address} (this process, epoch {term.epoch})"
