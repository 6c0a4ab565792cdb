"""The start check of a lake: reachable, usable, and (on object storage) safe to commit to.

Run before every writer starts (the streaming run, the snapshot CLI, reconcile's own repair:
:func:`check_lake_once` from ``take_lease``; `config check` runs :func:`check_lake` afresh),
so bad input fails at once with the URI and the cause instead of deep inside the first commit:
an unreachable endpoint, refused credentials, a missing bucket, no permission.

It also shows that the store makes writes atomic with a single winner, which fencing needs:
delta-rs on S3 without conditional puts (or a locking provider) lets two writers land the same
version, and the side files (:mod:`cdc_platform.sink.lake_files`) need ``If-None-Match`` and
``If-Match`` to refuse a paused old holder. Three probes, under ``<lake>/_cdc/``:

* a stale commit: two handles of a tiny Delta table (``probe``) opened at one version commit in
  turn with no retries; the second must be refused (a store that ignores the condition fails);
* a race: two handles at one version commit at the same moment (two threads released by one
  barrier); exactly one may land;
* a side-file race: two handles that saw no object create it at the same moment, then two that
  read the same version replace it at the same moment; exactly one may win each time.

What it proves: that the store refused the loser of each pair, in order and at the same moment,
with these credentials and this configuration, now. A store that let both win is unsafe and is
refused. One race won by one writer does not prove the store is atomic under every
interleaving (no finite test can); it catches stores that ignore the conditions or check them
apart from the write often enough to be caught by a single race.
"""

from __future__ import annotations

import os
import re
import threading
import uuid
from collections.abc import Callable

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, write_deltalake
from deltalake.exceptions import CommitFailedError, TableNotFoundError

from cdc_platform.config.lake import (
    CONDITIONAL_PUT_OPTION,
    LOCKING_PROVIDER_OPTION,
    LakeLocation,
)
from cdc_platform.errors import LakeAccessError, SinkError, StaleSideFileError
from cdc_platform.sink.lake_files import LakeFile
from cdc_platform.sink.local_lake import check_local_lake
from cdc_platform.sink.storage_errors import LIBRARY_ERRORS, Redactor

__all__ = ["PROBE_PARTS", "SIDE_PROBE_PARTS", "check_lake", "check_lake_once"]

PROBE_PARTS = ("_cdc", "probe")
"""Where the probe table lives under the lake root."""
SIDE_PROBE_PARTS = ("_cdc", "probe-side-files")
"""Where the side-file race puts its (removed) objects."""

_CHECKED: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
"""The lakes this process has checked (uri and storage options)."""
_CHECKED_LOCK = threading.Lock()
_PROBE_ERRORS: tuple[type[BaseException], ...] = (*LIBRARY_ERRORS, SinkError)
"""delta-rs's errors and the side files' (already SinkError), classified below."""

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
    """Raise LakeAccessError unless ``lake`` can be read, written and committed to safely
    (see the module docstring).

    A local lake is only made and written once (renames and a folder lock give one winner):
    a path that is no directory, no permission or a read-only file system fails here.
    """
    if not lake.is_remote:
        check_local_lake(lake.uri)
        return
    uri = lake.join(*PROBE_PARTS)
    options = lake.delta_options()
    redact = Redactor(uri, options)
    try:
        _open_or_create(uri, options)
        landed_twice = _second_commit_lands(uri, options) or _racing_commits_both_land(uri, options)
        side_files_unsafe = not landed_twice and _side_file_race_won_twice(lake)
    except LakeAccessError:
        raise
    except _PROBE_ERRORS as exc:
        raise _classify(lake, exc, redact) from redact.cause(exc)
    if landed_twice:
        raise LakeAccessError(
            lake.uri,
            "the store does not make commits atomic: two writers committed the same Delta "
            "version and both landed, so fencing cannot hold",
            _UNSAFE_ADVICE,
        )
    if side_files_unsafe:
        raise LakeAccessError(
            lake.uri,
            "the store does not make conditional writes atomic: two writers replaced the same "
            "object and both succeeded, so a paused old holder could overwrite its successor's "
            "files",
            "use a store that honours If-None-Match and If-Match on PUT",
        )
    with _CHECKED_LOCK:
        _CHECKED.add(_checked_key(lake))


def check_lake_once(lake: LakeLocation | None) -> None:
    """:func:`check_lake` unless this process has already checked ``lake`` (every writer
    calls this before it takes the lease; None: no lake to check). A local lake is checked
    every time (one directory and one small file)."""
    if lake is None:
        return
    if not lake.is_remote:
        check_local_lake(lake.uri)
        return
    with _CHECKED_LOCK:
        if _checked_key(lake) in _CHECKED:
            return
    check_lake(lake)


def _checked_key(lake: LakeLocation) -> tuple[str, tuple[tuple[str, str], ...]]:
    return lake.uri, tuple(sorted(lake.storage_options.items()))


def _race(attempts: tuple[Callable[[], bool], Callable[[], bool]]) -> tuple[bool, bool]:
    """Run both at the same moment (one barrier releases two threads); whether each won.
    An error of either is raised here."""
    start = threading.Barrier(2)
    won = [False, False]
    errors: list[BaseException] = []

    def run(index: int) -> None:
        try:
            start.wait()
            won[index] = attempts[index]()
        except BaseException as exc:  # raised again in the caller's thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return won[0], won[1]


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


def _racing_commits_both_land(uri: str, options: dict[str, str] | None) -> bool:
    """True when two commits of one version made at the same moment both land (unsafe)."""
    row = pa.table({"probe": [os.urandom(4).hex()]}, schema=_PROBE_SCHEMA)
    once = CommitProperties(max_commit_retries=0)

    def committer(table: DeltaTable) -> Callable[[], bool]:
        def commit() -> bool:
            try:
                write_deltalake(table, row, mode="append", commit_properties=once)
            except CommitFailedError:
                return False
            return True

        return commit

    for _ in range(_RACE_ATTEMPTS):
        first = DeltaTable(uri, storage_options=options)
        second = DeltaTable(uri, storage_options=options)
        if first.version() != second.version():
            continue  # another process committed between the two loads
        won = _race((committer(first), committer(second)))
        if any(won):
            return all(won)
    return False  # another process won every race: refusals work


def _side_file_race_won_twice(lake: LakeLocation) -> bool:
    """True when two conditional writes of one object at the same moment both succeed."""
    uri = lake.join(*SIDE_PROBE_PARTS, f"{uuid.uuid4().hex}.json")
    options = lake.storage_options

    def writer(handle: LakeFile, text: str) -> Callable[[], bool]:
        def write() -> bool:
            try:
                handle.write_text(text)
            except StaleSideFileError:
                return False
            return True

        return write

    try:
        for step in ("create", "replace"):
            one, two = LakeFile(uri, options), LakeFile(uri, options)
            for handle in (one, two):
                handle.read_text()  # each writes conditional on what it saw
            # new bytes each time: an ETag names the content, so a rewrite of the same bytes
            # would leave the other's precondition true
            if all(_race((writer(one, f"{step} one"), writer(two, f"{step} two")))):
                return True
    finally:
        LakeFile(uri, options).delete()
    return False


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
