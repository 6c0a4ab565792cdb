"""Where the lake lives: a local directory or an ``s3://bucket/prefix``, and how to reach it.

Every table location is built here from the configured ``lake_root`` by joining URI parts
(never ``Path`` arithmetic, which would turn ``s3://b/p`` into ``s3:/b/p``). Credentials and
the endpoint come from the standard AWS environment, which delta-rs reads itself; the
platform file may add non-secret ``lake_storage_options``. For S3, commits are made safe
against concurrent writers by default with conditional puts (``aws_conditional_put: etag``),
unless the user configured a locking provider (``AWS_S3_LOCKING_PROVIDER``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from cdc_platform.config.urls import redact_url, url_has_secret
from cdc_platform.errors import ConfigError

__all__ = [
    "CONDITIONAL_PUT_OPTION",
    "LOCKING_PROVIDER_OPTION",
    "REMOTE_SCHEMES",
    "LakeLocation",
    "check_lake_root",
    "check_storage_options",
]

REMOTE_SCHEMES = ("s3",)
"""Object stores the lake may live on (tested against a real S3-compatible server)."""

CONDITIONAL_PUT_OPTION = "aws_conditional_put"
"""delta-rs's storage option that makes S3 commits atomic with put-if-absent."""

LOCKING_PROVIDER_OPTION = "aws_s3_locking_provider"
"""delta-rs's storage option (or ``AWS_S3_LOCKING_PROVIDER``) for a DynamoDB commit lock."""

_SECRET_OPTION = re.compile(
    r"secret|password|passwd|token|access_key|session|credential|sas|signature|private",
    re.IGNORECASE,
)


def check_lake_root(value: str) -> str:
    """``value`` if it is a local path or a supported URI; else why not (ValueError).

    Typos that would otherwise become local folders are refused: ``s3:/bucket`` or
    ``s3:bucket`` (a folder named ``s3:``), ``~/lake`` (a folder named ``~``: nothing expands
    it). A URI with credentials (``s3://KEY:SECRET@bucket``, ``?token=...``) is refused like every
    other URL with a secret, and no message quotes them.
    """
    near_uri = re.match(r"^([A-Za-z][A-Za-z0-9+.-]+):(?!//)", value)
    if near_uri is not None:
        scheme = near_uri.group(1).lower()
        hint = f"write {scheme}://bucket/prefix" if scheme in REMOTE_SCHEMES else "check it"
        raise ValueError(
            f"it looks like a URI missing a slash after {scheme}: ({hint}); a local path may "
            "not start with a scheme"
        )
    if value == "~" or value.startswith(("~/", "~\\")) or re.match(r"^~[A-Za-z0-9_.-]+/", value):
        raise ValueError(
            f"{value!r} starts with ~, which nothing expands here (it would be a folder named "
            "'~'): write the absolute path, or one relative to the conf directory"
        )
    scheme = _scheme(value)
    if scheme and (url_has_secret(value) or "@" in urlsplit(value).netloc):
        raise ValueError(
            f"{_without_credentials(value)!r} must not carry credentials: secrets never go in "
            "files; set the standard AWS environment variables (AWS_ACCESS_KEY_ID, "
            "AWS_SECRET_ACCESS_KEY) and write s3://bucket/prefix"
        )
    if scheme in ("", "file") or scheme in REMOTE_SCHEMES:
        if scheme in REMOTE_SCHEMES and not urlsplit(value).netloc:
            raise ValueError(f"{value!r} names no bucket: write {scheme}://bucket/prefix")
        return value
    raise ValueError(
        f"{value!r}: the scheme {scheme}:// is not supported; use a local path or "
        "s3://bucket/prefix (S3 and S3-compatible stores)"
    )


def check_storage_options(options: Mapping[str, str]) -> Mapping[str, str]:
    """``options`` if no key looks like a secret (secrets come from the environment only)."""
    for key in options:
        if _SECRET_OPTION.search(key):
            raise ValueError(
                f"{key!r} looks like a secret: secrets never go in files; set the standard "
                "AWS environment variable (e.g. AWS_SECRET_ACCESS_KEY) instead"
            )
    return options


def _without_credentials(value: str) -> str:
    """``value`` for a message: any user info and secret parameter replaced by ``***``."""
    parts = urlsplit(value)
    if "@" in parts.netloc:
        value = urlunsplit(parts._replace(netloc="***@" + parts.netloc.rpartition("@")[2]))
    return redact_url(value)


def _scheme(value: str) -> str:
    """The URI scheme, or "" for a plain path (a one-letter scheme is a Windows drive)."""
    match = re.match(r"^([A-Za-z][A-Za-z0-9+.-]*)://", value)
    return match.group(1).lower() if match else ""


@dataclass(frozen=True)
class LakeLocation:
    """The lake root as a URI (an absolute path for a local lake) and its storage options.

    ``storage_options`` is what every delta-rs call on the lake receives: the user's
    ``lake_storage_options`` plus, for S3 without a locking provider, conditional puts.
    """

    uri: str
    storage_options: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def resolve(
        cls,
        lake_root: str,
        base_dir: Path,
        options: Mapping[str, str] | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> LakeLocation:
        """The location of ``lake_root``; a relative local path is taken from ``base_dir``."""
        try:
            check_lake_root(lake_root)
            check_storage_options(options or {})
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        scheme = _scheme(lake_root)
        if scheme in REMOTE_SCHEMES:
            merged = dict(options or {})
            if not _has_option(merged, environ or {}, LOCKING_PROVIDER_OPTION) and not (
                _has_option(merged, environ or {}, CONDITIONAL_PUT_OPTION)
            ):
                merged[CONDITIONAL_PUT_OPTION] = "etag"
            return cls(lake_root.rstrip("/"), merged)
        path = Path(lake_root.removeprefix("file://"))
        root = path if path.is_absolute() else base_dir / path
        return cls(str(root), dict(options or {}))

    @property
    def is_remote(self) -> bool:
        """True for an object store (no local directory behind it)."""
        return _scheme(self.uri) in REMOTE_SCHEMES

    @property
    def scheme(self) -> str:
        """``s3`` for S3; ``""`` for a local lake."""
        return _scheme(self.uri)

    def join(self, *parts: str) -> str:
        """``<lake>/<part>/<part>...`` as a URI (or an absolute path for a local lake)."""
        clean = [p.strip("/") for p in parts if p.strip("/")]
        for part in clean:
            if any(piece in ("", ".", "..") for piece in part.split("/")):
                raise ValueError(f"not a plain relative location: {part!r}")
        if not clean:
            return self.uri
        return "/".join([self.uri.rstrip("/"), *clean])

    def local_path(self) -> Path:
        """The local directory of the lake; ConfigError for a lake on object storage."""
        if self.is_remote:
            raise ConfigError(
                f"lake_root {self.uri}: this part of the platform keeps its state in local "
                "files and is not yet on object storage; use a local lake_root for it"
            )
        return Path(self.uri)

    def delta_options(self) -> dict[str, str] | None:
        """The storage options as delta-rs takes them (None when there are none)."""
        return dict(self.storage_options) or None

    def __repr__(self) -> str:
        return f"LakeLocation(uri={self.uri!r}, options={sorted(self.storage_options)})"


def _has_option(options: Mapping[str, str], environ: Mapping[str, str], name: str) -> bool:
    """True when ``name`` is set in the options (any case) or as an upper-case variable."""
    return any(key.lower() == name for key in options) or bool(environ.get(name.upper()))
