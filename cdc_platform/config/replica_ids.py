"""Destinations that would read one server under one replica ``server_id``.

A MySQL/MariaDB server keeps one binlog connection per replica server id: when a second reader
registers with an id already connected, the server drops the first one. Two destinations with
the same ``(host, port, server_id)`` would therefore disconnect each other in turns, so
`config check` refuses them.
"""

from __future__ import annotations

from collections import defaultdict

from cdc_platform.config.loader import ConfigSet

__all__ = ["replica_id_conflicts"]

_LOOPBACK = frozenset({"localhost", "127.0.0.1", "::1", "[::1]"})


def _server_key(host: str, port: int) -> tuple[str, int]:
    name = host.strip().lower()
    return ("loopback" if name in _LOOPBACK else name, port)


def replica_id_conflicts(config: ConfigSet) -> dict[str, str]:
    """Destination -> why its ``server_id`` clashes with another enabled destination's."""
    groups: dict[tuple[str, int, int], list[str]] = defaultdict(list)
    for name, dest in sorted(config.destinations.items()):
        source = dest.config.source
        if not dest.config.enabled or source.mode != "binlog":
            continue
        groups[(*_server_key(source.host, source.port), source.server_id)].append(name)
    out: dict[str, str] = {}
    for (_host, _port, server_id), names in groups.items():
        if len(names) < 2:
            continue
        for name in names:
            others = ", ".join(n for n in names if n != name)
            source = config.destinations[name].config.source
            out[name] = (
                f"source.server_id {server_id} is also used by {others} on "
                f"{source.host}:{source.port}: the server keeps one binlog connection per "
                "replica id and drops the other; give each destination its own server_id"
            )
    return out
