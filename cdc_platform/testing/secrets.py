"""Secrets the test suite plants, so a test can prove none of them ever reaches a message or log."""

from __future__ import annotations

__all__ = [
    "PLANTED_SECRET",
    "REPLICATION_PASSWORD",
    "S3_READONLY_SECRET_KEY",
    "S3_SECRET_KEY",
    "SUITE_SECRETS",
    "leaked_secrets",
]

REPLICATION_PASSWORD = "cdc-secret"
"""The password of the private MariaDB's replication user."""

PLANTED_SECRET = "Pl4nted-s3cret-Zq"
"""A password written where a careless user would put one (URLs, environment variables)."""

S3_SECRET_KEY = "cdc-test-secret-3e9b1f"
"""The secret key of the private S3 server's one identity."""

S3_READONLY_SECRET_KEY = "cdc-test-readonly-7c2d"
"""The secret key of the private S3 server's read-only identity."""

SUITE_SECRETS = (REPLICATION_PASSWORD, PLANTED_SECRET, S3_SECRET_KEY, S3_READONLY_SECRET_KEY)


def leaked_secrets(text: str) -> list[str]:
    """The suite's secrets that occur in ``text``."""
    return [secret for secret in SUITE_SECRETS if secret in text]
