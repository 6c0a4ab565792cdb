"""Reads and writes of a destination's ZooKeeper nodes, beside the lease's term bookkeeping.

:func:`ensure_paths` creates the persistent nodes (``cluster``, ``epoch``);
:func:`join_cluster` creates this process's ephemeral member node, :func:`leave_cluster` deletes
it and :func:`list_members` reads them all (active and standby processes); :func:`read_holder`
reads the running node; :func:`mark_released` sets ``active: false`` in the running node
(``cdc-platform release``); :func:`delete_own` deletes the running node this lease object
wrote; :func:`delete_dead_holder` deletes a running node whose holder a liveness probe proved
dead, only if it is still that holder's node at that epoch, with ZooKeeper's version check.
ZooKeeper lets any client with the DELETE permission on the parent delete an ephemeral node
of another session; with a digest ACL (``lease.auth_env``) every process of the destination
has it, and a process without it gets an error, and the holder's session expiry decides.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections.abc import Callable
from typing import Any

from kazoo.exceptions import BadVersionError, KazooException, NodeExistsError, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError

from cdc_platform.errors import LeaseBackendError
from cdc_platform.ha.members import HolderInfo, MemberInfo
from cdc_platform.ha.running_node import UNKNOWN_HOLDER, RunningData

__all__ = [
    "Op",
    "delete_dead_holder",
    "delete_own",
    "ensure_paths",
    "join_cluster",
    "leave_cluster",
    "list_members",
    "mark_released",
    "parse_epoch",
    "read_holder",
]

Op = Callable[..., Any]
"""The session's ``op``: runs one async kazoo call with a timeout, errors translated."""


def ensure_paths(client: Any, cluster_path: str, epoch_path: str, label: str) -> None:
    """Create the persistent cluster node and the epoch counter (-1: none handed out yet)."""
    try:
        client.ensure_path(cluster_path)
        with contextlib.suppress(NodeExistsError):
            client.create(epoch_path, b"-1")
    except (KazooTimeoutError, KazooException, OSError) as exc:
        raise LeaseBackendError(
            f"{label}: creating {cluster_path} failed: {type(exc).__name__}: {exc}"
        ) from exc


def parse_epoch(raw: bytes | None) -> int:
    """The epoch counter's value; -1 when it is empty or not a number."""
    try:
        return int(raw or b"-1")
    except ValueError:
        return -1


def join_cluster(
    op: Op, client: Any, member_path: str, content: bytes, session_id: int | None
) -> bool | None:
    """Create the ephemeral member node: True once it is this session's, False while another
    session's (an earlier process with this address), None when it went meanwhile (try again).

    Raises NoNodeError when its parent is missing.
    """
    try:
        op("create", client.create_async, member_path, content, ephemeral=True)
    except NodeExistsError:
        try:
            _raw, stat = op("read", client.get_async, member_path)
        except NoNodeError:
            return None
        return bool(stat.ephemeralOwner == session_id)
    return True


def leave_cluster(op: Op, client: Any, member_path: str, *, usable: bool) -> str | None:
    """Delete this process's member node; None when it is gone, else why it could not be."""
    if not usable:
        return "ZooKeeper is unreachable"
    try:
        op("delete", client.delete_async, member_path)
    except NoNodeError:
        return None
    except (LeaseBackendError, BadVersionError) as exc:
        return str(exc)
    return None


def list_members(op: Op, client: Any, cluster_path: str) -> list[MemberInfo]:
    """The member nodes under ``cluster_path``, by name."""
    try:
        names = op("list", client.get_children_async, cluster_path)
    except NoNodeError:
        return []
    found: list[MemberInfo] = []
    for name in sorted(names):
        try:
            raw, stat = op("read", client.get_async, f"{cluster_path}/{name}")
        except NoNodeError:
            continue
        try:
            data = json.loads(raw or b"{}")
        except ValueError:
            data = {}
        found.append(
            MemberInfo(
                address=name,
                run_id=str(data.get("run_id", "?")),
                since=data.get("since", stat.ctime / 1000.0),
                last_seen=None,
            )
        )
    return found


def delete_dead_holder(
    op: Op, client: Any, running_path: str, run_id: str, epoch: int
) -> RunningData | None:
    """Delete the running node if it still is ``run_id``'s at ``epoch``; what was deleted.

    None when the node is gone or belongs to someone else by now (the data watch tells).
    Raises LeaseBackendError when ZooKeeper refuses or cannot be reached.
    """
    try:
        raw, stat = op("read", client.get_async, running_path)
        data = RunningData.parse(raw)
        if data is None or (data.run_id, data.epoch) != (run_id, epoch):
            return None
        op("delete", client.delete_async, running_path, version=stat.version)
    except (NoNodeError, BadVersionError):
        return None
    return data


def delete_own(op: Op, client: Any, running_path: str, run_id: str, epoch: int | None) -> None:
    """Delete the running node if the lease object ``run_id`` wrote it (of ``epoch``, if given)."""
    try:
        raw, stat = op("read", client.get_async, running_path)
        data = RunningData.parse(raw)
        if data is not None and data.run_id == run_id and (epoch is None or data.epoch == epoch):
            op("delete", client.delete_async, running_path, version=stat.version)
    except (NoNodeError, BadVersionError):
        pass


def mark_released(op: Op, client: Any, running_path: str, destination: str) -> HolderInfo | None:
    """Set ``active: false`` in the running node (version-checked, retried on a race); the
    holder asked, or None when nobody holds it."""
    for _ in range(5):
        try:
            raw, stat = op("read", client.get_async, running_path)
        except NoNodeError:
            return None
        data = RunningData.parse(raw)
        if data is None:
            return None
        released = dataclasses.replace(data, active=False)
        try:
            op("write", client.set_async, running_path, released.to_bytes(), version=stat.version)
        except BadVersionError:
            continue
        except NoNodeError:
            return None
        return HolderInfo(
            destination=destination,
            address=data.address,
            run_id=data.run_id,
            epoch=data.epoch,
            active=False,
            since=data.since,
            backend="zookeeper",
        )
    return None


def read_holder(op: Op, client: Any, running_path: str, destination: str) -> HolderInfo | None:
    """The running node's content, or None when absent."""
    try:
        raw, stat = op("read", client.get_async, running_path)
    except NoNodeError:
        return None
    data = RunningData.parse(raw) or UNKNOWN_HOLDER
    return HolderInfo(
        destination=destination,
        address=data.address,
        run_id=data.run_id,
        epoch=data.epoch,
        active=data.active,
        since=data.since if data.since is not None else stat.ctime / 1000.0,
        expires_at=None,
        backend="zookeeper",
    )
