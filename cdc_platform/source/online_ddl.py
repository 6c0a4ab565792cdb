"""The transient tables of online schema-change tools, by name (the swap that ends them:
:mod:`cdc_platform.source.stream.swaps`).

pt-online-schema-change copies a table ``t`` into ``_t_new`` (triggers on ``t`` replay the
changes made meanwhile), swaps the names with one ``RENAME TABLE t TO _t_old, _t_new TO t`` and
drops ``_t_old``. gh-ost copies into ``_t_gho`` (replaying ``t``'s binlog), keeps its own state
in ``_t_ghc``, and swaps with ``RENAME TABLE t TO _t_del, _t_gho TO t`` (``_t_del`` is also its
cut-over sentry; ``--timestamp-old-table`` puts a time before ``_del``). Both add leading
underscores when the name is taken.

The *shadow* (``_t_new``, ``_t_gho``) becomes ``t`` at the swap: its row events, from its
``CREATE TABLE`` on, are the tool's copy, so the source follows them (docs/ddl.md). The others
(``_t_old``, ``_t_del``, ``_t_ghc``) hold nothing the mirror needs and are not captured.
Either kind is a transient table only beside a captured ``t``: a user's own ``_x_new`` without
a captured ``x`` is an ordinary table.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["SHADOW_ROLES", "Transient", "transient_table"]

SHADOW_ROLES = frozenset({"new", "gho"})
"""The roles whose table becomes the original at the swap (pt-osc's and gh-ost's copies)."""

_TRANSIENT = re.compile(r"_+(?P<target>.+?)(?:_\d{14})?_(?P<role>new|old|gho|ghc|del)")


@dataclass(frozen=True, slots=True)
class Transient:
    """A transient table's role (``new``, ``old``, ``gho``, ``ghc``, ``del``) and the table it
    belongs to."""

    role: str
    target: str

    @property
    def shadow(self) -> bool:
        """The tool's copy, which becomes ``target`` at the swap."""
        return self.role in SHADOW_ROLES


def transient_table(table: str) -> Transient | None:
    """The role and target of ``table`` if its name is a tool's transient name, else None."""
    match = _TRANSIENT.fullmatch(table)
    if match is None:
        return None
    return Transient(match["role"], match["target"])
