"""Small state objects in the lake (local directory or S3 bucket), addressed by URI.

Everything a destination keeps besides its Delta tables (snapshot progress, the record of
captured tables, the reconcile inbox, reconcile staging) lives under the lake root, so any
node that can reach the lake can continue any destination: nothing is kept on a node's own
disk. :class:`LakeFile` is that one place: it speaks ``pyarrow.fs`` to a local directory or
an S3-compatible store with the same storage options delta-rs gets (``AWS_ENDPOINT_URL``,
``AWS_REGION``, ``AWS_ALLOW_HTTP``; credentials from the options or the standard AWS
environment), and joins URIs with :func:`join_uri`, never ``Path`` arithmetic (which turns
``s3://b/p`` into ``s3:/b/p``).

Guarantees: a write replaces the whole object at once (local: temporary file, fsync, rename;
S3: one PUT, visible only when complete), so a reader never sees half an object. A
:meth:`LakeFile.move_to` is atomic with a single winner on local disks (a rename); on object
stores it is a server-side copy then a delete, so two movers of one object may both succeed:
the callers (the reconcile inbox) are built so that is harmless. Library errors are raised
once here as :class:`SinkError` (transient: storage trouble may pass) with no storage secret
in the message.
"""

from __future__ import annotations

import contextlib
import json
import os
import uuid
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from cdc_platform.errors import ConfigError, SinkError
from cdc_platform.sink.storage_errors import LIBRARY_ERRORS, Redactor

__all__ = ["LakeFile", "join_uri", "s3_filesystem"]

_S3_SCHEMES = ("s3", "s3a")
_OPTION_NAMES: dict[str, tuple[str, ...]] = {
    # delta-rs / object_store spellings of each setting, lower case; the first is the
    # environment variable the AWS SDKs read.
    "endpoint": ("aws_endpoint_url", "aws_endpoint", "endpoint_url", "endpoint"),
    "region": ("aws_region", "aws_default_region", "region"),
    "allow_http": ("aws_allow_http", "allow_http"),
    "access_key": ("aws_access_key_id", "access_key_id"),
    "secret_key": ("aws_secret_access_key", "secret_access_key"),
    "session_token": ("aws_session_token", "session_token", "token"),
}


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


def _option(options: Mapping[str, str], setting: str) -> str | None:
    lowered = {k.lower(): v for k, v in options.items()}
    for name in _OPTION_NAMES[setting]:
        if lowered.get(name):
            return lowered[name]
    env = os.environ.get(_OPTION_NAMES[setting][0].upper())
    return env or None


def s3_filesystem(storage_options: Mapping[str, str] | None) -> pafs.S3FileSystem:
    """An S3 file system configured like delta-rs from the same options (and the AWS
    environment for what they leave out)."""
    options = storage_options or {}
    kwargs: dict[str, Any] = {}
    endpoint = _option(options, "endpoint")
    if endpoint:
        parts = urlsplit(endpoint if "://" in endpoint else f"https://{endpoint}")
        kwargs["endpoint_override"] = parts.netloc
        kwargs["scheme"] = parts.scheme
        allow = (_option(options, "allow_http") or "").lower() in ("1", "true", "yes")
        if parts.scheme == "http" and not allow:
            raise ConfigError(
                f"the S3 endpoint {parts.scheme}://{parts.netloc} is plain http: set "
                "AWS_ALLOW_HTTP=true (storage option or environment) to allow it"
            )
    region = _option(options, "region")
    if region:
        kwargs["region"] = region
    access, secret = _option(options, "access_key"), _option(options, "secret_key")
    if access and secret:
        kwargs["access_key"], kwargs["secret_key"] = access, secret
        token = _option(options, "session_token")
        if token:
            kwargs["session_token"] = token
    return pafs.S3FileSystem(**kwargs)


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
        _fs: pafs.FileSystem | None = None,
    ) -> None:
        self.uri = uri
        self.storage_options = dict(storage_options) if storage_options else None
        self._redact = Redactor(uri, self.storage_options)
        scheme = urlsplit(uri).scheme.lower() if "://" in uri else ""
        self.is_local = scheme in ("", "file")
        if self.is_local:
            local = uri[len("file://") :] if scheme == "file" else uri
            self.path = os.path.abspath(local)
            self._fs: pafs.FileSystem = _fs or pafs.LocalFileSystem()
        elif scheme in _S3_SCHEMES:
            parts = urlsplit(uri)
            self.path = f"{parts.netloc}{parts.path}".rstrip("/")
            self._fs = _fs or s3_filesystem(self.storage_options)
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

    @property
    def filesystem(self) -> pafs.FileSystem:
        """The ``pyarrow`` file system, for writers that take one (Parquet)."""
        return self._fs

    def child(self, *parts: str) -> LakeFile:
        """The object ``parts`` below this one (same storage)."""
        return LakeFile(join_uri(self.uri, *parts), self.storage_options, _fs=self._fs)

    def _error(self, what: str, exc: BaseException) -> SinkError:
        detail = self._redact(f"{type(exc).__name__}: {exc}")
        return SinkError(f"{what} {self._redact.uri} failed: {detail}")

    # -- reading ---------------------------------------------------------------------------

    def read_text(self) -> str | None:
        """The object's text, or None when there is none."""
        try:
            with self._fs.open_input_stream(self.path) as stream:
                data: bytes = stream.read()
        except FileNotFoundError:
            return None
        except LIBRARY_ERRORS as exc:
            error = self._error("reading", exc)
            try:
                missing = not self.exists()  # some stores answer a missing key otherwise
            except SinkError:
                missing = False
            if missing:
                return None
            raise error from self._redact.cause(exc)
        return data.decode("utf-8")

    def read_json(self) -> Any:
        """The object parsed as JSON, or None when there is none (ValueError: not JSON)."""
        text = self.read_text()
        return None if text is None else json.loads(text)

    def _info(self) -> pafs.FileInfo:
        try:
            return self._fs.get_file_info(self.path)
        except LIBRARY_ERRORS as exc:
            raise self._error("looking up", exc) from self._redact.cause(exc)

    def exists(self) -> bool:
        """Whether the object (or folder) exists."""
        return bool(self._info().type != pafs.FileType.NotFound)

    def modified(self) -> float | None:
        """The object's modification time (seconds since the epoch), None when absent."""
        info = self._info()
        if info.type == pafs.FileType.NotFound or info.mtime is None:
            return None
        return float(info.mtime.timestamp())

    def list(self, suffix: str = "") -> list[str]:
        """The names of the objects directly in this folder ending with ``suffix``, sorted
        (empty when the folder does not exist; temporary files are left out)."""
        selector = pafs.FileSelector(self.path, allow_not_found=True, recursive=False)
        try:
            infos = self._fs.get_file_info(selector)
        except LIBRARY_ERRORS as exc:
            raise self._error("listing", exc) from self._redact.cause(exc)
        names = (i.base_name for i in infos if i.type == pafs.FileType.File)
        return sorted(n for n in names if n.endswith(suffix) and not n.startswith("."))

    # -- writing ---------------------------------------------------------------------------

    def write_text(self, text: str) -> None:
        """Replace the object with ``text`` at once (see the module docstring)."""
        data = text.encode("utf-8")
        try:
            if self.is_local:
                self._write_local(data)
            else:
                with self._fs.open_output_stream(self.path) as stream:
                    stream.write(data)
        except LIBRARY_ERRORS as exc:
            raise self._error("writing", exc) from self._redact.cause(exc)

    def _write_local(self, data: bytes) -> None:
        folder = os.path.dirname(self.path)
        os.makedirs(folder, exist_ok=True)
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

    def write_json(self, item: Any) -> None:
        """Replace the object with ``item`` as JSON (keys sorted)."""
        self.write_text(json.dumps(item, sort_keys=True, default=str))

    def write_parquet(self, table: pa.Table) -> None:
        """Write ``table`` as one Parquet object here (staging files Spark reads back)."""
        try:
            if self.is_local:
                os.makedirs(os.path.dirname(self.path), exist_ok=True)
            pq.write_table(table, self.path, filesystem=self._fs)
        except LIBRARY_ERRORS as exc:
            raise self._error("writing", exc) from self._redact.cause(exc)

    def touch(self) -> None:
        """Renew the modification time (a sign of life); SinkError when the object is gone."""
        if self.is_local:
            try:
                os.utime(self.path)
            except OSError as exc:
                raise self._error("touching", exc) from None
            return
        text = self.read_text()  # object stores have no utime: write the same bytes again
        if text is None:
            raise self._error("touching", FileNotFoundError(self.uri))
        self.write_text(text)

    def delete(self) -> bool:
        """Remove the object; False when it was not there."""
        try:
            if self.is_local:
                os.unlink(self.path)
                return True
            if not self.exists():
                return False
            self._fs.delete_file(self.path)
        except FileNotFoundError:
            return False
        except LIBRARY_ERRORS as exc:
            raise self._error("deleting", exc) from self._redact.cause(exc)
        return True

    def delete_tree(self) -> None:
        """Remove this folder and everything below it (nothing when absent)."""
        try:
            if self._info().type != pafs.FileType.NotFound:
                self._fs.delete_dir(self.path)
        except FileNotFoundError:
            return
        except LIBRARY_ERRORS as exc:
            raise self._error("deleting", exc) from self._redact.cause(exc)

    def move_to(self, target: LakeFile) -> bool:
        """Move this object to ``target`` (same storage); False when it was not there.

        Local: one rename, so of two movers only one succeeds. Object stores: a server-side
        copy, then the delete of this object; ``target`` exists before this object is gone,
        but two concurrent movers may both succeed.
        """
        try:
            if self.is_local:
                os.makedirs(os.path.dirname(target.path), exist_ok=True)
                os.replace(self.path, target.path)
                return True
            if not self.exists():
                return False
            self._fs.copy_file(self.path, target.path)
        except FileNotFoundError:
            return False
        except LIBRARY_ERRORS as exc:
            if not self.is_local and not self.exists() and not target.exists():
                return False  # gone before the copy (withdrawn or moved)
            raise self._error("moving", exc) from self._redact.cause(exc)
        self.delete()  # moved; someone else may have deleted the source meanwhile
        return True
