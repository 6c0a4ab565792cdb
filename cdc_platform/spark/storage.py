"""The lake's S3 settings as each Spark engine takes them, from the one lake configuration.

delta-rs and the platform's own lake files read ``lake_root``'s storage options plus the
standard AWS environment. The Spark engines read S3 their own ways:

* **embedded (Sail)** reads the standard AWS environment of this process (``AWS_ENDPOINT_URL``,
  ``AWS_REGION``, ``AWS_ALLOW_HTTP``, credentials, profiles), measured with pysail 0.7.2; it
  has no Spark conf for S3. Non-secret overrides given in ``lake_storage_options`` are
  therefore exported to this process's environment (:func:`sail_environment`).
* **connect / classic** (Apache Spark with hadoop-aws) read ``spark.hadoop.fs.s3a.*``:
  :func:`s3a_conf` gives the endpoint, region, path-style access and TLS from the same
  settings, and maps ``s3://`` to the S3A file system. Credentials are never put in the conf:
  S3A's default provider chain reads the same AWS environment variables, profiles and
  instance roles. For ``connect`` the settings reach the session; the server must have the
  hadoop-aws jars.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from urllib.parse import urlsplit

from cdc_platform.config.lake import LakeLocation

__all__ = ["S3A_FILESYSTEM", "export_sail_environment", "s3a_conf", "sail_environment"]

S3A_FILESYSTEM = "org.apache.hadoop.fs.s3a.S3AFileSystem"
"""Hadoop's S3 file system (hadoop-aws), which serves ``s3://`` and ``s3a://`` lake URIs."""

_SETTINGS: dict[str, tuple[str, ...]] = {
    # environment variable first, then the delta-rs / object_store spellings (lower case)
    "AWS_ENDPOINT_URL": ("aws_endpoint_url", "aws_endpoint", "endpoint_url", "endpoint"),
    "AWS_REGION": ("aws_region", "aws_default_region", "region"),
    "AWS_ALLOW_HTTP": ("aws_allow_http", "allow_http"),
    "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": (
        "aws_virtual_hosted_style_request",
        "virtual_hosted_style_request",
    ),
}


def _given(options: Mapping[str, str]) -> dict[str, str]:
    """The non-secret S3 settings the options give, by environment-variable name."""
    lowered = {k.lower(): v for k, v in options.items()}
    found: dict[str, str] = {}
    for env, names in _SETTINGS.items():
        for name in (env.lower(), *names):
            if lowered.get(name):
                found[env] = lowered[name]
                break
    return found


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


def sail_environment(lake: LakeLocation) -> dict[str, str]:
    """The AWS variables to export so that Sail sees ``lake_storage_options``' overrides
    (empty for a local lake or when the options give none)."""
    if not lake.is_remote:
        return {}
    return _given(lake.storage_options)


def export_sail_environment(lake: LakeLocation) -> None:
    """Export :func:`sail_environment` into this process's environment (Sail reads it when it
    first opens the bucket); the options win over the variables, as in delta-rs."""
    os.environ.update(sail_environment(lake))


def s3a_conf(lake: LakeLocation, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """``spark.hadoop.fs.s3a.*`` settings equivalent to the lake's (empty for a local lake).

    The options win over the environment (``environ``, default ``os.environ``), as in
    delta-rs. Path-style requests unless virtual-hosted style is asked for (delta-rs's
    default too, and what MinIO, Ceph and SeaweedFS need).
    """
    if not lake.is_remote:
        return {}
    env = os.environ if environ is None else environ
    settings = {key: env[key] for key in _SETTINGS if env.get(key)}
    settings.update(_given(lake.storage_options))
    conf = {
        "spark.hadoop.fs.s3.impl": S3A_FILESYSTEM,
        "spark.hadoop.fs.s3a.impl": S3A_FILESYSTEM,
        "spark.hadoop.fs.s3a.path.style.access": str(
            not _truthy(settings.get("AWS_VIRTUAL_HOSTED_STYLE_REQUEST"))
        ).lower(),
    }
    endpoint = settings.get("AWS_ENDPOINT_URL")
    if endpoint:
        conf["spark.hadoop.fs.s3a.endpoint"] = endpoint
        scheme = urlsplit(endpoint).scheme if "://" in endpoint else "https"
        conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] = str(scheme != "http").lower()
    region = settings.get("AWS_REGION")
    if region:
        conf["spark.hadoop.fs.s3a.endpoint.region"] = region
    return conf
