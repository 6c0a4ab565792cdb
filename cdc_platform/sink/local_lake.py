"""A local lake that cannot be written: a permanent fault, not storage trouble that may pass.

delta-rs and the object-store client report a local ``lake_root`` that is a regular file, a
directory without permission or a read-only file system as generic store errors ("Generic
LocalFileSystem error: ... (os error 20)"), which the sink raises as transient: the run then
retried the term's start every few seconds for ever. The same settings fail again until the
operator changes something, so :func:`permanent_local_error` names them, once, where the
library errors become the engine's (:class:`~cdc_platform.sink.lake_files.LakeFile`,
:class:`~cdc_platform.sink.storage_errors.StorageGuard`), and :func:`check_local_lake` finds
them before a writer takes its lease. Object-store errors keep their retry.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import uuid
from collections.abc import Callable

from cdc_platform.errors import LakeAccessError

__all__ = ["PERMANENT_ERRNOS", "check_local_lake", "os_error_number", "permanent_local_error"]

PERMANENT_ERRNOS = frozenset({errno.ENOTDIR, errno.EACCES, errno.EPERM, errno.EROFS})
"""Local errors a retry cannot cure: a part of the path is a file, no permission, a
read-only file system (EEXIST is not here: a create-if-absent that lost is fencing)."""

_OS_ERROR = re.compile(r"\(os error (\d+)\)")
"""How the Rust libraries (delta-rs, object_store) quote the OS error number."""

_ADVICE = (
    "point lake_root at a directory this user can create and write (a path whose every part "
    "is a directory, on a writable file system); a retry cannot help"
)


def os_error_number(exc: BaseException) -> int | None:
    """The OS error number of ``exc``: an OSError's own, or the one a Rust library quoted."""
    if isinstance(exc, OSError) and exc.errno is not None:
        return exc.errno
    found = _OS_ERROR.search(str(exc))
    return int(found.group(1)) if found else None


def permanent_local_error(
    root: str, exc: BaseException, doing: str = "", redact: Callable[[str], str] = str
) -> LakeAccessError | None:
    """A non-transient LakeAccessError naming the local path ``root`` when ``exc`` (raised
    while ``doing``) is a local fault no retry cures (None: the caller keeps its error).
    ``redact`` removes storage secrets from the library's words."""
    number = os_error_number(exc)
    if number is None or number not in PERMANENT_ERRNOS:
        return None
    filename = getattr(exc, "filename", None)
    words = str(exc).strip().splitlines()  # the Rust libraries' first line names the file
    where = str(filename) if filename else redact(words[0] if words else root)
    cause = f"{os.strerror(number).lower()}: {where}"
    return LakeAccessError(root, f"{doing} failed, {cause}" if doing else cause, _ADVICE)


def check_local_lake(root: str) -> None:
    """Create the local lake's directory (as the first commit would) and write and remove
    one probe file in it, so a lake that cannot be written fails before the lease.

    Raises:
        LakeAccessError: not transient for :data:`PERMANENT_ERRNOS`, transient otherwise.
    """
    probe = os.path.join(root, f".cdc-write-probe-{uuid.uuid4().hex}")
    try:
        os.makedirs(root, exist_ok=True)
        with open(probe, "xb") as handle:
            handle.write(b"probe\n")
    except OSError as exc:
        if exc.errno == errno.EEXIST:  # makedirs: the root itself is not a directory
            exc = NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), root)
        refusal = permanent_local_error(root, exc)
        if refusal is not None:
            raise refusal from None
        raise LakeAccessError(
            root, f"cannot write: {exc}", "a retry may help", transient=True
        ) from exc
    finally:
        with contextlib.suppress(OSError):
            os.remove(probe)
