"""File-system events of a conf directory (watchdog), reduced to "scan now".

Only what can change a decision wakes the monitor: an ``instance.yaml`` under
``destinations/<name>/`` created, modified, deleted or moved in or out (editors that save by
renaming a temp file onto it included), a destination directory itself appearing, vanishing or
being renamed, and ``platform.yaml``. Editor temp files (``.instance.yaml.swp``,
``instance.yaml~``, ``4913``) never match. A burst of events (a partial write then the rest)
is one wake-up: the scan reads the file's content, and the content hash decides.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer

from cdc_platform.config.loader import DESTINATIONS_DIR, INSTANCE_FILE, PLATFORM_FILE

__all__ = ["ConfigWatch", "is_relevant"]

log = logging.getLogger("cdc_platform.serve")


def is_relevant(conf_dir: Path, path: str, *, is_directory: bool) -> bool:
    """True when a change at ``path`` may change what serve should run."""
    try:
        parts = Path(path).relative_to(conf_dir).parts
    except ValueError:
        return False
    if parts == (PLATFORM_FILE,):
        return not is_directory
    if len(parts) < 2 or parts[0] != DESTINATIONS_DIR or parts[1].startswith("."):
        return False
    if len(parts) == 2:  # destinations/<name>
        return is_directory
    return len(parts) == 3 and parts[2] == INSTANCE_FILE and not is_directory


class _Handler(FileSystemEventHandler):
    def __init__(self, conf_dir: Path, wake: threading.Event) -> None:
        self._conf_dir = conf_dir
        self._wake = wake

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.event_type in ("opened", "closed_no_write"):
            return
        paths = [event.src_path, getattr(event, "dest_path", "")]
        for raw in paths:
            path = raw.decode() if isinstance(raw, bytes) else raw
            if path and is_relevant(self._conf_dir, path, is_directory=event.is_directory):
                log.debug("config event %s %s", event.event_type, path)
                self._wake.set()
                return


class ConfigWatch:
    """A watchdog observer on the conf directory that sets ``wake`` on relevant changes."""

    def __init__(self, conf_dir: Path, wake: threading.Event) -> None:
        self.conf_dir = conf_dir.resolve()
        self._observer = Observer()
        self._observer.daemon = True
        self._observer.schedule(_Handler(self.conf_dir, wake), str(self.conf_dir), recursive=True)

    def start(self) -> None:
        """Begin delivering events (the observer thread is a daemon)."""
        self._observer.start()

    def stop(self) -> None:
        """Stop the observer thread."""
        self._observer.stop()
        self._observer.join(timeout=5)
