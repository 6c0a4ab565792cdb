"""Libraries a long-running ``run`` or ``serve`` process never uses, kept out of it, and
the native allocators set to give memory back.

pyarrow asks for pandas whenever it may be handed a DataFrame (``pa.table(dict)`` and the
Delta writes built on it), which loads pandas (about 40 MB of resident memory) for good, and
it loads numpy on import when numpy is installed (about 14 MB). Nothing the change-capture
process does needs either (the Delta writes, reads, maintenance and compaction all go through
Arrow), so :func:`keep_out_unused_libraries` makes them unimportable there: pyarrow then takes
them as not installed. The console script does this for ``run`` and ``serve`` only, before
they import anything heavy; the commands that use pandas (Spark's reconcile and mirror) and
every in-process caller of :func:`cdc_platform.cli.main` are left alone.

:func:`return_freed_memory` picks the native allocators the Delta commits go through:
pyarrow's jemalloc pool instead of its default mimalloc, and delta-rs's own jemalloc (linked
into its library) set to hand freed pages back at once, from a background thread, instead of
keeping them for up to ten seconds. Measured with ``bench/run_rss.py --rows 100000``, three
runs each: peak RSS 280-288 MB with pyarrow's jemalloc alone, 266-268 MB with both, 298-300 MB
with delta-rs's setting alone; rows/s within the noise (median 15.2k
against 15.5k; purging inline instead of from the thread cost about 10 %). pyarrow's system
pool measured 278-282 MB.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType

__all__ = [
    "ALLOCATOR_SETTINGS",
    "UNUSED_LIBRARIES",
    "keep_out_unused_libraries",
    "return_freed_memory",
]

UNUSED_LIBRARIES = ("pandas", "numpy")

ALLOCATOR_SETTINGS = {
    "ARROW_DEFAULT_MEMORY_POOL": "jemalloc",
    "_RJEM_MALLOC_CONF": "background_thread:true,dirty_decay_ms:0,muzzy_decay_ms:0",
}
"""Environment read by pyarrow (its default pool) and delta-rs's jemalloc (its ``MALLOC_CONF``)
when they load."""


class _KeepOut:
    """A meta path finder that refuses some top-level packages and their submodules."""

    def __init__(self, names: tuple[str, ...]) -> None:
        self.names = names

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None = None,
        target: ModuleType | None = None,
    ) -> ModuleSpec | None:
        if fullname.partition(".")[0] in self.names:
            raise ModuleNotFoundError(
                f"No module named {fullname!r} (the run and serve processes keep "
                f"{', '.join(self.names)} out to save memory)",
                name=fullname,
            )
        return None


def keep_out_unused_libraries() -> tuple[str, ...]:
    """Make importing :data:`UNUSED_LIBRARIES` fail in this process from now on; the names
    kept out (none that is imported already)."""
    names = tuple(name for name in UNUSED_LIBRARIES if name not in sys.modules)
    if names and not any(isinstance(f, _KeepOut) for f in sys.meta_path):
        sys.meta_path.insert(0, _KeepOut(names))
    return names


def return_freed_memory() -> dict[str, str]:
    """Set :data:`ALLOCATOR_SETTINGS` for this process before pyarrow and deltalake load (they
    read them once); a variable the environment already sets is left as it is. Returns the
    settings made."""
    made: dict[str, str] = {}
    if "pyarrow" in sys.modules or "deltalake" in sys.modules:
        return made
    for name, value in ALLOCATOR_SETTINGS.items():
        if name not in os.environ:
            os.environ[name] = value
            made[name] = value
    return made
