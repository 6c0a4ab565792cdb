"""The state-watch key scheme: which keys a destination's processes publish, defined once.

The lease holder writes them (the supervisor), ``cdc-platform status`` and the Dagster sensors
read them; both sides build the keys here so they cannot drift apart.
"""

from __future__ import annotations

__all__ = ["config_key", "lease_key", "state_keys", "status_key"]


def lease_key(destination: str) -> str:
    """The holder's lease state: ``{state, address, run_id, epoch, backend, since}``."""
    return f"lease/{destination}"


def status_key(destination: str) -> str:
    """The holder's last commit: ``{epoch, batch_seq, position, lag_seconds, committed_at,
    rows}``."""
    return f"status/{destination}"


def config_key(destination: str) -> str:
    """The config the holder runs: ``{content_hash, address, epoch}``."""
    return f"config/{destination}"


def state_keys(destination: str) -> dict[str, str]:
    """Every key a destination's processes publish, by kind (``lease``, ``status``, ``config``)."""
    return {
        "lease": lease_key(destination),
        "status": status_key(destination),
        "config": config_key(destination),
    }
