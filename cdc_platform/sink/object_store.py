"""The one object-store client of the lake's side files: ``obstore`` (object_store, as delta-rs).

delta-rs reaches the change log through the Rust ``object_store`` crate; the files beside it
(snapshot progress, the captured-tables and re-read records, ``_start.json``, the request
inboxes, reconcile staging) go through ``obstore``, the Python binding of the same crate, so
both read the endpoint, the region and the credentials the same way: the storage options
delta-rs gets (``AWS_ENDPOINT_URL``, ``AWS_REGION``, ``AWS_ALLOW_HTTP``, keys) and, for what
they leave out, the standard AWS environment, then a profile's static keys and region in the
shared files (``AWS_PROFILE``, else ``default``; ``AWS_SHARED_CREDENTIALS_FILE``,
``AWS_CONFIG_FILE``), then the crate's own chain (web identity, container credentials,
instance metadata). Profiles that only name a role, SSO or a process are not resolved here:
give such nodes the environment variables or a role.

Both stacks also speak conditional puts the same way (``If-None-Match``/``If-Match``, the
crate's ``conditional_put: etag``), which the side files use to fence a paused old writer off
(see :mod:`cdc_platform.sink.lake_files`). A local lake is a :class:`obstore.store.LocalStore`
over the file system root.
"""

from __future__ import annotations

import configparser
import functools
import os
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

import obstore
from obstore.store import LocalStore, S3Store

from cdc_platform.errors import ConfigError

__all__ = ["STORE_ERRORS", "Store", "local_store", "s3_store"]

Store = S3Store | LocalStore
"""A store the side files live in."""

STORE_ERRORS: tuple[type[BaseException], ...] = (obstore.exceptions.BaseError, OSError)
"""What the client raises for storage trouble (translated once, in ``lake_files``)."""

_OPTION_NAMES: dict[str, tuple[str, ...]] = {
    # delta-rs / object_store spellings of each setting, lower case; the first is the
    # environment variable the AWS SDKs read.
    "endpoint": ("aws_endpoint_url", "aws_endpoint", "endpoint_url", "endpoint"),
    "region": ("aws_region", "aws_default_region", "region"),
    "allow_http": ("aws_allow_http", "allow_http"),
    "access_key_id": ("aws_access_key_id", "access_key_id"),
    "secret_access_key": ("aws_secret_access_key", "secret_access_key"),
    "session_token": ("aws_session_token", "session_token", "token"),
}
_PASSED_ON = frozenset(
    {
        "checksum_algorithm",
        "container_credentials_relative_uri",
        "metadata_endpoint",
        "request_payer",
        "role_arn",
        "role_session_name",
        "server_side_encryption",
        "skip_signature",
        "sse_bucket_key_enabled",
        "sse_kms_key_id",
        "sts_endpoint",
        "unsigned_payload",
        "virtual_hosted_style_request",
        "web_identity_token_file",
    }
)
"""Further object_store S3 settings a user may give delta-rs (``aws_`` prefix optional);
delta-rs-only ones (the DynamoDB locking provider) do not concern the side files."""


def _option(options: Mapping[str, str], setting: str) -> str | None:
    lowered = {k.lower(): v for k, v in options.items()}
    for name in _OPTION_NAMES[setting]:
        if lowered.get(name):
            return lowered[name]
    env = os.environ.get(_OPTION_NAMES[setting][0].upper())
    return env or None


def s3_store(bucket: str, storage_options: Mapping[str, str] | None) -> S3Store:
    """An S3 store of ``bucket`` configured like delta-rs from the same options (and the AWS
    environment for what they leave out), with conditional puts by ETag."""
    options = dict(storage_options or {})
    config: dict[str, str] = {"conditional_put": "etag"}
    client: dict[str, Any] = {}
    endpoint = _option(options, "endpoint")
    if endpoint:
        parts = urlsplit(endpoint if "://" in endpoint else f"https://{endpoint}")
        allow = (_option(options, "allow_http") or "").lower() in ("1", "true", "yes")
        if parts.scheme == "http" and not allow:
            raise ConfigError(
                f"the S3 endpoint {parts.scheme}://{parts.netloc} is plain http: set "
                "AWS_ALLOW_HTTP=true (storage option or environment) to allow it"
            )
        config["endpoint"] = f"{parts.scheme}://{parts.netloc}"
        client["allow_http"] = parts.scheme == "http"
    for setting in ("region", "access_key_id", "secret_access_key", "session_token"):
        value = _option(options, setting)
        if value:
            config[setting] = value
    profile = _profile()
    if "access_key_id" not in config:
        for setting in ("access_key_id", "secret_access_key", "session_token"):
            if profile.get(f"aws_{setting}"):
                config[setting] = profile[f"aws_{setting}"]
    if "region" not in config and profile.get("region"):
        config["region"] = profile["region"]
    for key, value in options.items():
        name = key.lower().removeprefix("aws_")
        if name in _PASSED_ON:
            config[name] = value
    return _cached_s3(bucket, tuple(sorted(config.items())), tuple(sorted(client.items())))


def _profile() -> dict[str, str]:
    """The settings of the selected profile in the shared credentials and config files
    (credentials file first), lower-case keys; empty when there is none."""
    name = os.environ.get("AWS_PROFILE") or os.environ.get("AWS_DEFAULT_PROFILE") or "default"
    home = os.path.expanduser("~")
    files = (
        (os.environ.get("AWS_SHARED_CREDENTIALS_FILE") or f"{home}/.aws/credentials", name),
        (
            os.environ.get("AWS_CONFIG_FILE") or f"{home}/.aws/config",
            name if name == "default" else f"profile {name}",
        ),
    )
    found: dict[str, str] = {}
    for path, section in files:
        parser = configparser.RawConfigParser()
        try:
            parser.read(path, encoding="utf-8")
        except (OSError, configparser.Error):
            continue  # an unreadable file gives nothing, as in the AWS SDKs
        if parser.has_section(section):
            for key, value in parser.items(section):
                found.setdefault(key.lower(), value.strip())
    return found


@functools.lru_cache(maxsize=64)
def _cached_s3(
    bucket: str, config: tuple[tuple[str, str], ...], client: tuple[tuple[str, Any], ...]
) -> S3Store:
    """One client per bucket and settings (each holds a connection pool)."""
    settings: Any = dict(config)  # S3Config's keys, checked above (a TypedDict of literals)
    options: Any = dict(client)
    return S3Store(bucket, config=settings, client_options=options)


@functools.cache
def local_store() -> LocalStore:
    """The local file system from its root (keys are absolute paths without the first /)."""
    return LocalStore()
