"""The config monitor's decision (Canal's InstanceConfigMonitor): what to start, reload, stop.

A pure diff of the destinations root against what was seen last time (name -> content hash),
so every caller (the Dagster sensor each tick, a watchdog-driven loop) decides the same way.
Only the instance file's content counts: editor temp files and mtime-only touches never
trigger a reload. An invalid file leaves a running destination on its last good config, so a
typo cannot take down a working pipeline; the error is reported until fixed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from cdc_platform.config.loader import ConfigSet
from cdc_platform.errors import ConfigFileError

__all__ = ["ConfigChanges", "diff_destinations"]


@dataclass(frozen=True)
class ConfigChanges:
    """What changed since the previous scan, and the state to remember for the next one."""

    start: list[str] = field(default_factory=list)
    """New (or newly enabled) valid destinations."""
    reload: list[str] = field(default_factory=list)
    """Valid destinations whose instance file content changed."""
    stop: list[str] = field(default_factory=list)
    """Destinations removed or disabled."""
    invalid: dict[str, ConfigFileError] = field(default_factory=dict)
    """Destinations whose file does not load; running ones keep their last good config."""
    seen: dict[str, str] = field(default_factory=dict)
    """Name -> content hash of every destination that should be running after this scan."""

    @property
    def empty(self) -> bool:
        """True when nothing needs doing."""
        return not (self.start or self.reload or self.stop)


def diff_destinations(previous: Mapping[str, str], current: ConfigSet) -> ConfigChanges:
    """Compare the last scan's hashes with the destinations on disk now."""
    changes = ConfigChanges(invalid=dict(current.errors))
    for name, destination in sorted(current.destinations.items()):
        if not destination.config.enabled:
            if name in previous:
                changes.stop.append(name)
            continue
        changes.seen[name] = destination.content_hash
        if name not in previous:
            changes.start.append(name)
        elif previous[name] != destination.content_hash:
            changes.reload.append(name)
    for name, content_hash in sorted(previous.items()):
        if name in changes.seen or name in changes.stop:
            continue
        if name in current.errors:
            changes.seen[name] = content_hash  # keep running on the last good config
        else:
            changes.stop.append(name)
    return changes
