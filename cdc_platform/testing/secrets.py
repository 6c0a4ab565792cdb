"""Secrets the test suite plants, so a test can prove none of them ever reaches a message or log."""

from __future__ import annotations

__all__ = ["PLANTED_SECRET", "REPLICATION_PASSWORD", "SUITE_SECRETS", "leaked_secrets"]

REPLICATION_PASSWORD = "cdc-secret"
"""The password of the private MariaDB's replication user."""

PLANTED_SECRET = "Pl4nted-s3cret-Zq"
"""A password written where a careless user would put one (URLs, environment variables)."""

SUITE_SECRETS = (REPLICATION_PASSWORD, PLANTED_SECRET)


def leaked_secrets(text: str) -> list[str]:
    """The suite's secrets that occur in ``text``."""
    return [secret for secret in SUITE_SECRETS if secret in text]
