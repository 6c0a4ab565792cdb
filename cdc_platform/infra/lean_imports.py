"""Libraries a long-running ``run`` or ``serve`` process never uses, kept out of it.

pyarrow asks for pandas whenever it may be handed a DataFrame (``pa.table(dict)`` and the
Delta writes built on it), and loading pandas costs about 40 MB of resident memory for good.
Nothing the change-capture process does needs pandas (the Delta writes, reads, maintenance
and compaction all go through Arrow), so :func:`keep_out_pandas` makes it unimportable there:
pyarrow then takes it as not installed. The commands that do use it (Spark's reconcile and
mirror) never call this.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType

__all__ = ["keep_out_pandas"]

_KEPT_OUT = "pandas"


class _KeepOut:
    """A meta path finder that refuses one top-level package and its submodules."""

    def __init__(self, name: str) -> None:
        self.name = name

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None = None,
        target: ModuleType | None = None,
    ) -> ModuleSpec | None:
        if fullname == self.name or fullname.startswith(self.name + "."):
            raise ModuleNotFoundError(
                f"No module named {fullname!r} (the run and serve processes keep {self.name} "
                "out to save memory)",
                name=fullname,
            )
        return None


def keep_out_pandas() -> bool:
    """Make ``import pandas`` fail in this process from now on; False (nothing done) when it
    is imported already."""
    if _KEPT_OUT in sys.modules:
        return False
    if not any(isinstance(f, _KeepOut) and f.name == _KEPT_OUT for f in sys.meta_path):
        sys.meta_path.insert(0, _KeepOut(_KEPT_OUT))
    return True
