"""Small state objects in the lake (local directory or S3 bucket), addressed by URI.

Everything a destination keeps besides its Delta tables (snapshot progress, the record of
captured tables, the re-read list, ``_start.json``, the request inboxes, reconcile staging)
lives under the lake root, so any node that can reach the lake can continue any destination:
nothing is kept on a node's own disk. :class:`LakeFile` is that one place: it speaks to the
store through the same object-store client delta-rs uses (:mod:`.object_store`), and joins
URIs with :func:`join_uri`, never ``Path`` arithmetic (which turns ``s3://b/p`` into
``s3:/b/p``).

Guarantees: a write replaces the whole object at once (local: temporary file, fsync, rename;
S3: one PUT, visible only when complete), so a reader never sees half an object.

Fencing: a handle remembers the version (ETag) of the object it last read or wrote, and its
next write is conditional on it: ``If-Match`` that version, or ``If-None-Match`` when it saw no
object (local disks: the same check under a lock on the folder). So a writer paused between
its read and its write (an old lease holder) cannot overwrite what a newer term wrote
meanwhile: its write raises :class:`~cdc_platform.errors.StaleSideFileError` and the file keeps
the newer term's content. A handle that never looked writes unconditionally (the inboxes'
request and result files, staging). A :meth:`LakeFile.delete` of a handle that looked first
checks the version; object stores have no conditional delete, so one round trip of window
remains there.

A :meth:`LakeFile.move_to` is atomic with a single winner on local disks (a rename); on object
stores it is a server-side copy then a delete, so two movers of one object may both succeed:
the callers (the request inbox) are built so that is harmless. Library errors are raised
once here as :class:`SinkError` (transient: storage trouble may pass) with no storage secret
in the message; a local lake that cannot be written (not a directory, no permission, a
read-only file system) as a non-transient LakeAccessError (:mod:`.local_lake`).
"""

from __future__ import annotations

import builtins
import contextlib
import fcntl
import io
import json
import os
import shutil
import uuid
from collections.abc import Iterator, Mapping
from typing import Any, BinaryIO, Final
from urllib.parse import urlsplit

import obstore
import pyarrow as pa

from cdc_platform.errors import ConfigError, LakeAccessError, SinkError, StaleSideFileError
from cdc_platform.sink.local_lake import permanent_local_error
from cdc_platform.sink.object_store import STORE_ERRORS, Store, local_store, s3_store
from cdc_platform.sink.storage_errors import Redactor

__all__ = ["LakeFile", "join_uri"]

_S3_SCHEMES = ("s3", "s3a")
_NEVER: Final = "never looked"
"""The version a handle holds before it read, looked up or wrote its object."""
_ABSENT: Final = "seen absent"


def join_uri(base: str, *parts: str) -> str:
    """``base/part/...`` for a local path or a URI (``s3://bucket/prefix``); a part may not
    be empty, absolute, or climb out with ``..``."""
    for part in parts:
        pieces = part.split("/")
        if not part or part.startswith("/") or ".." in pieces or "" in pieces:
            raise ValueError(f"not a relative lake path part: {part!r}")
    if not parts:
        return base
    return "/".join([base.rstrip("/"), *parts])


class LakeFile:
    """One object (or a folder of them) under the lake root; see the module docstring.

    ``uri`` is a local path (relative ones are taken from the working directory), a
    ``file://`` URI or an ``s3://bucket/key`` URI; ``storage_options`` as given to delta-rs.
    """

    def __init__(
        self,
        uri: str,
        storage_options: Mapping[str, str] | None = None,
        *,
        _store: Store | None = None,
    ) -> None:
        self.uri = uri
        self.storage_options = dict(storage_options) if storage_options else None
        self._redact = Redactor(uri, self.storage_options)
        scheme = urlsplit(uri).scheme.lower() if "://" in uri else ""
        self.is_local = scheme in ("", "file")
        self._seen: str = _NEVER
        if self.is_local:
            local = uri[len("file://") :] if scheme == "file" else uri
            self.path = os.path.abspath(local)
            self._key = self.path.lstrip("/")
            self._store: Store = _store or local_store()
        elif scheme in _S3_SCHEMES:
            parts = urlsplit(uri)
            self.path = f"{parts.netloc}{parts.path}".rstrip("/")
            self._key = self.path.partition("/")[2]
            self._store = _store or s3_store(parts.netloc, self.storage_options)
        else:
            raise ConfigError(
                f"{self._redact.uri}: unsupported lake scheme {scheme!r} (use a local path, "
                "file:// or s3://)"
            )

    def __repr__(self) -> str:
        return f"LakeFile({self._redact.uri!r})"

    def __str__(self) -> str:
        return self._redact.uri

    @property
    def name(self) -> str:
        """The last part of the path."""
        return self.path.rstrip("/").rsplit("/", 1)[-1]

    def child(self, *parts: str) -> LakeFile:
        """The object ``parts`` below this one (same storage)."""
        return LakeFile(join_uri(self.uri, *parts), self.storage_options, _store=self._store)

    def _error(self, what: str, exc: BaseException) -> SinkError:
        detail = self._redact(f"{type(exc).__name__}: {exc}")
        if isinstance(exc, obstore.exceptions.NotSupportedError):
            return LakeAccessError(
                self._redact.uri,
                f"{what} failed, the store does not support it: {detail}",
                "use a store that honours conditional puts (If-Match, If-None-Match)",
            )
        uri = self._redact.uri
        refusal = permanent_local_error(uri, exc, what, self._redact) if self.is_local else None
        return refusal or SinkError(f"{what} {uri} failed: {detail}")

    def _stale(self, why: str) -> StaleSideFileError:
        return StaleSideFileError(
            f"{self._redact.uri}: {why}; another writer (a newer lease term) wrote it since "
            "this one read it, so this writer is fenced off and must stop (its term is over)"
        )

    @contextlib.contextmanager
    def _guard(self, what: str) -> Iterator[None]:
        try:
            yield
        except STORE_ERRORS as exc:
            raise self._error(what, exc) from self._redact.cause(exc)

    # -- reading ---------------------------------------------------------------------------

    def read_bytes(self) -> bytes | None:
        """The object's bytes, or None when there is none (remembers its version)."""
        with self._guard("reading"):
            try:
                result = obstore.get(self._store, self._key)
                data = bytes(result.bytes())
            except (FileNotFoundError, obstore.exceptions.NotFoundError):
                self._seen = _ABSENT
                return None
        self._seen = result.meta["e_tag"] or _NEVER
        return data

    def read_text(self) -> str | None:
        """The object's text, or None when there is none."""
        data = self.read_bytes()
        return None if data is None else data.decode("utf-8")

    def read_json(self) -> Any:
        """The object parsed as JSON, or None when there is none (ValueError: not JSON)."""
        text = self.read_text()
        return None if text is None else json.loads(text)

    def _head(self) -> dict[str, Any] | None:
        """The object's metadata (None: no object here); remembers its version."""
        with self._guard("looking up"):
            try:
                meta = obstore.head(self._store, self._key)
            except (FileNotFoundError, obstore.exceptions.NotFoundError):
                self._seen = _ABSENT
                return None
        self._seen = meta["e_tag"] or _NEVER
        return dict(meta)

    def _current_version(self) -> str:
        """The version now in the store (``_ABSENT`` when none), without remembering it."""
        seen = self._seen
        try:
            meta = self._head()
            return _ABSENT if meta is None else str(meta["e_tag"] or _NEVER)
        finally:
            self._seen = seen

    def exists(self) -> bool:
        """Whether the object (or folder) exists."""
        if self.is_local and os.path.isdir(self.path):
            return True
        if self._head() is not None:
            return True
        with self._guard("listing"):
            below = obstore.list_with_delimiter(self._store, self._key)
        return bool(below["objects"] or below["common_prefixes"])

    def modified(self) -> float | None:
        """The object's modification time (seconds since the epoch), None when absent (and
        for a folder on an object store, which has none)."""
        if self.is_local:
            try:
                return os.stat(self.path).st_mtime
            except FileNotFoundError:
                return None
            except OSError as exc:
                raise self._error("looking up", exc) from None
        meta = self._head()
        return None if meta is None else float(meta["last_modified"].timestamp())

    def _listing(self) -> tuple[builtins.list[str], builtins.list[str]]:
        """The names of the objects and of the folders directly in this folder."""
        if self.is_local and not os.path.isdir(self.path):
            return [], []
        with self._guard("listing"):
            below = obstore.list_with_delimiter(self._store, self._key)
        objects = [str(m["path"]).rsplit("/", 1)[-1] for m in below["objects"]]
        folders = [str(p).rstrip("/").rsplit("/", 1)[-1] for p in below["common_prefixes"]]
        return objects, folders

    def list(self, suffix: str = "") -> list[str]:
        """The names of the objects directly in this folder ending with ``suffix``, sorted
        (empty when the folder does not exist; temporary files are left out)."""
        names = self._listing()[0]
        return sorted(n for n in names if n.endswith(suffix) and not n.startswith("."))

    def folders(self) -> builtins.list[str]:
        """The names of the folders directly in this folder, sorted."""
        return sorted(self._listing()[1])

    # -- writing ---------------------------------------------------------------------------

    def write_bytes(self, data: bytes) -> None:
        """Replace the object with ``data`` at once, fenced (see the module docstring)."""
        self._put(data, fenced=True)

    def write_text(self, text: str) -> None:
        """Replace the object with ``text`` at once, fenced (see the module docstring)."""
        self._put(text.encode("utf-8"), fenced=True)

    def write_json(self, item: Any) -> None:
        """Replace the object with ``item`` as JSON (keys sorted), fenced."""
        self.write_text(json.dumps(item, sort_keys=True, default=str))

    def write_parquet(self, table: pa.Table) -> None:
        """Write ``table`` as one Parquet object here (staging files Spark reads back).

        ``pyarrow.parquet`` is imported here, by the reconciliation that stages files, not by
        every process that writes side files: it loads pyarrow's file systems with their S3
        library (about 12 MB of resident memory the change capture never uses)."""
        import pyarrow.parquet as pq  # noqa: PLC0415 (see above)

        sink = pa.BufferOutputStream()
        try:
            pq.write_table(table, sink)
        except pa.ArrowException as exc:
            raise self._error("writing", exc) from None
        self._put(sink.getvalue().to_pybytes(), fenced=False)

    def _put(self, data: bytes, *, fenced: bool) -> None:
        seen = self._seen if fenced else _NEVER
        if self.is_local:
            self._put_local(data, seen)
            return
        mode: obstore.PutMode = (
            "overwrite" if seen == _NEVER else "create" if seen == _ABSENT else {"e_tag": seen}
        )
        with self._guard("writing"):
            try:
                result = obstore.put(self._store, self._key, data, mode=mode, use_multipart=False)
            except (obstore.exceptions.AlreadyExistsError, obstore.exceptions.PreconditionError):
                raise self._stale("the conditional write was refused") from None
        self._seen = result["e_tag"] or _NEVER

    def _put_local(self, data: bytes, seen: str) -> None:
        folder = os.path.dirname(self.path)
        with self._guard("writing"):
            os.makedirs(folder, exist_ok=True)
        with self._guard("writing"), self._exclusive(seen != _NEVER):
            if seen != _NEVER and self._current_version() != seen:
                raise self._stale("it changed since it was read")
            tmp = os.path.join(folder, f".{self.name}.{uuid.uuid4().hex[:8]}.tmp")
            try:
                with open(tmp, "wb") as handle:
                    handle.write(data)
                    handle.flush()
                    os.fsync(handle.fileno())
                os.replace(tmp, self.path)
            finally:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp)
            self._head()  # remember the version written

    def reader(self, size: int | None = None) -> io.RawIOBase:
        """A seekable binary file over the object that fetches it in ranges as it is read (a
        Parquet file's footer, then its row groups); ``size`` (bytes) saves a lookup."""
        with self._guard("reading"):
            return _RangedReader(obstore.open_reader(self._store, self._key, size=size))

    def upload(self, source: BinaryIO) -> None:
        """Create the object from the open file ``source``, streamed in parts; it becomes
        visible only when complete. Refused (SinkError) when the object exists already: this
        is for new objects under unique names (a compaction's data file)."""
        with self._guard("writing"):
            obstore.put(self._store, self._key, source, mode="create")

    def touch(self) -> None:
        """Renew the modification time (a sign of life); SinkError when the object is gone."""
        if self.is_local:
            try:
                os.utime(self.path)
            except OSError as exc:
                raise self._error("touching", exc) from None
            return
        data = self.read_bytes()  # object stores have no utime: write the same bytes again
        if data is None:
            raise self._error("touching", FileNotFoundError(self.uri))
        self._put(data, fenced=False)

    def delete(self) -> bool:
        """Remove the object; False when it was not there. A handle that read the object
        first refuses (StaleSideFileError) when another writer replaced it since."""
        seen = self._seen
        fenced = seen not in (_NEVER, _ABSENT)
        with self._guard("deleting"), self._exclusive(fenced):
            current = self._current_version()
            if current == _ABSENT:
                self._seen = _ABSENT
                return False
            if fenced and current != seen:
                raise self._stale("it changed since it was read, so it is not deleted")
            try:
                obstore.delete(self._store, self._key)
            except (FileNotFoundError, obstore.exceptions.NotFoundError):
                return False
            finally:
                self._seen = _ABSENT
        return True

    def _exclusive(self, fenced: bool) -> contextlib.AbstractContextManager[None]:
        """The folder lock of a fenced local write or delete (nothing otherwise)."""
        if self.is_local and fenced:
            return _folder_lock(os.path.dirname(self.path))
        return contextlib.nullcontext()

    def delete_tree(self) -> None:
        """Remove this folder and everything below it (nothing when absent)."""
        if self.is_local:
            try:
                shutil.rmtree(self.path)
            except FileNotFoundError:
                return
            except OSError as exc:
                raise self._error("deleting", exc) from None
            return
        with self._guard("deleting"):
            keys = [
                str(meta["path"])
                for batch in obstore.list(self._store, f"{self._key}/")
                for meta in batch
            ]
            for start in range(0, len(keys), 1000):
                obstore.delete(self._store, keys[start : start + 1000])

    def copy_to(self, target: LakeFile) -> bool:
        """Copy this object to ``target`` (same storage); False when it was not there."""
        with self._guard("copying"):
            try:
                if target.is_local:
                    os.makedirs(os.path.dirname(target.path), exist_ok=True)
                obstore.copy(self._store, self._key, target._key)
            except (FileNotFoundError, obstore.exceptions.NotFoundError):
                return False
        return True

    def move_to(self, target: LakeFile) -> bool:
        """Move this object to ``target`` (same storage); False when it was not there.

        Local: one rename, so of two movers only one succeeds. Object stores: a server-side
        copy, then the delete of this object; ``target`` exists before this object is gone,
        but two concurrent movers may both succeed.
        """
        if self.is_local:
            try:
                os.makedirs(os.path.dirname(target.path), exist_ok=True)
                os.replace(self.path, target.path)
            except FileNotFoundError:
                return False
            except OSError as exc:
                raise self._error("moving", exc) from None
            return True
        if not self.copy_to(target):
            return False  # gone before the copy (withdrawn or moved)
        self._seen = _NEVER
        self.delete()  # moved; someone else may have deleted the source meanwhile
        return True


class _RangedReader(io.RawIOBase):
    """An obstore reader as a standard binary file (what pyarrow takes)."""

    def __init__(self, source: obstore.ReadableFile) -> None:
        super().__init__()
        self._source = source

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = memoryview(self._source.read(len(buffer)))
        buffer[: len(data)] = data
        return len(data)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        return self._source.seek(offset, whence)

    def tell(self) -> int:
        return self._source.tell()

    def close(self) -> None:
        if not self.closed:
            self._source.close()
        super().close()


@contextlib.contextmanager
def _folder_lock(folder: str) -> Iterator[None]:
    """An exclusive lock on a local folder for a conditional write (all processes of the
    machine that write side files in it take it; readers need none: writes are renames)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except FileNotFoundError:  # the folder is gone, and the object with it: nothing to guard
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
