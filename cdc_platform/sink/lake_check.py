"""The start check of a lake on object storage: reachable, usable, and safe to commit to.

Run before a writer starts, so bad input fails at once with the URI and the cause instead of
deep inside the first commit: an unreachable endpoint, refused credentials, a missing bucket,
no permission. It also proves that the store makes a Delta commit atomic: delta-rs on S3
without conditional puts (or a locking provider) lets two writers land the same version, which
would break fencing. The probe is a tiny Delta table under ``<lake>/_cdc/probe``: two handles
opened at one version commit in turn with no retries; the second must be refused.
"""

from __future__ import annotations

import os
import re

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, write_deltalake
from deltalake.exceptions import CommitFailedError, TableNotFoundError

from cdc_platform.config.lake import (
    CONDITIONAL_PUT_OPTION,
    LOCKING_PROVIDER_OPTION,
    LakeLocation,
)
from cdc_platform.errors import LakeAccessError
from cdc_platform.sink.storage_errors import LIBRARY_ERRORS, Redactor

__all__ = ["PROBE_PARTS", "check_lake"]

PROBE_PARTS = ("_cdc", "probe")
"""Where the probe table lives under the lake root."""

_PROBE_SCHEMA = pa.schema([("probe", pa.string())])
_RACE_ATTEMPTS = 5
"""Probes lost to another process probing at the same moment before giving up."""

_UNSAFE_ADVICE = (
    f"use a store that honours conditional puts (storage option {CONDITIONAL_PUT_OPTION}: "
    f"etag, the default) or configure a locking provider ({LOCKING_PROVIDER_OPTION}: dynamodb "
    "in lake_storage_options, or AWS_S3_LOCKING_PROVIDER)"
)

_CAUSES: tuple[tuple[re.Pattern[str], str, str, bool], ...] = (
    (
        re.compile(r"conditional put|put_opts", re.I),
        "the store cannot make commits atomic: conditional put is not available",
        _UNSAFE_ADVICE,
        False,
    ),
    (
        re.compile(r"NoSuchBucket", re.I),
        "the bucket does not exist",
        "create the bucket or correct lake_root",
        False,
    ),
    (
        re.compile(r"SignatureDoesNotMatch|InvalidAccessKeyId|InvalidToken|ExpiredToken", re.I),
        "the store refused the credentials",
        "check AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN (or the AWS "
        "profile) in the environment",
        False,
    ),
    (
        re.compile(r"AccessDenied|403 Forbidden|lacked the necessary privileges", re.I),
        "access denied: the credentials may not read and write under this prefix",
        "grant read, write, list and delete on the bucket prefix",
        False,
    ),
    (
        re.compile(
            r"tcp connect|error sending request|dns error|connection refused|timed out|Connect\)",
            re.I,
        ),
        "the endpoint cannot be reached",
        "check AWS_ENDPOINT_URL (and AWS_ALLOW_HTTP=true for http://) and the network; "
        "a retry helps once the store is up",
        True,
    ),
)


def check_lake(lake: LakeLocation) -> None:
    """Raise LakeAccessError unless ``lake`` can be read, written and committed to safely.

    A local lake needs no check (its directory is created on first commit).
    """
    if not lake.is_remote:
        return
    uri = lake.join(*PROBE_PARTS)
    options = lake.delta_options()
    redact = Redactor(uri, options)
    try:
        _open_or_create(uri, options)
        landed_twice = _second_commit_lands(uri, options)
    except LakeAccessError:
        raise
    except LIBRARY_ERRORS as exc:
        raise _classify(lake, exc, redact) from redact.cause(exc)
    if landed_twice:
        raise LakeAccessError(
            lake.uri,
            "the store does not make commits atomic: two writers committed the same Delta "
            "version and both landed, so fencing cannot hold",
            _UNSAFE_ADVICE,
        )


def _open_or_create(uri: str, options: dict[str, str] | None) -> DeltaTable:
    try:
        return DeltaTable(uri, storage_options=options)
    except TableNotFoundError:
        return DeltaTable.create(uri, _PROBE_SCHEMA, mode="ignore", storage_options=options)


def _second_commit_lands(uri: str, options: dict[str, str] | None) -> bool:
    """True when a second commit of the same version is not refused (unsafe store)."""
    row = pa.table({"probe": [os.urandom(4).hex()]}, schema=_PROBE_SCHEMA)
    once = CommitProperties(max_commit_retries=0)
    for _ in range(_RACE_ATTEMPTS):
        first = DeltaTable(uri, storage_options=options)
        second = DeltaTable(uri, storage_options=options)
        try:
            write_deltalake(first, row, mode="append", commit_properties=once)
        except CommitFailedError:
            continue  # another process probed at the same moment: try again
        try:
            write_deltalake(second, row, mode="append", commit_properties=once)
        except CommitFailedError:
            return False
        return True
    return False  # every attempt was refused by someone else's commit: refusals work


def _classify(lake: LakeLocation, exc: BaseException, redact: Redactor) -> LakeAccessError:
    text = f"{type(exc).__name__}: {exc}"
    endpoint = lake.storage_options.get("AWS_ENDPOINT_URL") or os.environ.get(
        "AWS_ENDPOINT_URL", "the default AWS endpoint"
    )
    for pattern, cause, advice, transient in _CAUSES:
        if pattern.search(text):
            said = f"{cause} ({endpoint})" if transient else cause
            return LakeAccessError(lake.uri, said, advice, transient=transient)
    detail = redact(text).splitlines()[0][:300]
    return LakeAccessError(
        lake.uri,
        f"the store failed: {detail}",
        "check lake_root, lake_storage_options and the AWS environment",
        transient=True,
    )
