"""Dagster names from source names: any database, table or destination name MySQL allows.

Two kinds of name come from a source name:

- *asset key parts* (``cdc/<destination>/<db>/<table>``) keep the name as it is, except for
  the few characters that would make the key's string form ambiguous or unselectable:
  ``/`` (the part separator), and ``"``, ``\\``, ``*``, ``%`` and control characters (which the
  selection syntax ``key:"..."`` cannot quote, or reads as a wildcard). Those are
  percent-encoded (``a/b`` -> ``a%2Fb``), so every key is unique *as a string* too and
  selectable exactly.
- *identifiers* (op, output, job and check names) must match ``^[A-Za-z0-9_]+$`` and avoid
  Python keywords: accents are dropped, other characters become ``_``, and a name that changed
  gets a short hash of the original, so two source names never share an identifier (``a b``,
  ``a_b``, ``A_B`` stay apart).
"""

from __future__ import annotations

import hashlib
import keyword
import re
import unicodedata
from collections import Counter
from collections.abc import Sequence

__all__ = ["identifier", "key_part", "unique_identifiers"]

_KEY_UNSAFE = re.compile(r'[%/"\\*\x00-\x1f\x7f]')
_NOT_IDENTIFIER = re.compile(r"[^A-Za-z0-9_]")
# Names Dagster refuses although they match its regex (its DISALLOWED_NAMES plus keywords).
_RESERVED = {
    "context", "conf", "config", "meta", "arg_dict", "dict", "input_arg_dict",
    "output_arg_dict", "int", "str", "float", "bool", "input", "output", "type",
    *keyword.kwlist,
}  # fmt: skip


def key_part(name: str) -> str:
    """``name`` as one asset key part: unchanged but for the characters listed above."""
    return _KEY_UNSAFE.sub(lambda m: f"%{ord(m.group()):02X}", name)


def _digest(parts: Sequence[str]) -> str:
    text = "\x00".join(parts).encode("utf-8", "surrogatepass")
    return hashlib.blake2b(text, digest_size=4).hexdigest()


def identifier(*parts: str) -> str:
    """A valid Dagster name for ``parts`` (joined by ``__``), readable and injective."""
    folded = [
        unicodedata.normalize("NFKD", p).encode("ascii", "ignore").decode("ascii") for p in parts
    ]
    name = "__".join(_NOT_IDENTIFIER.sub("_", p) for p in folded)
    exact = folded == list(parts) and name == "__".join(parts) and "__" not in "".join(parts)
    if not exact or not name or name in _RESERVED:
        name = f"{name}_{_digest(parts)}" if name else f"n_{_digest(parts)}"
    return name


def unique_identifiers(items: Sequence[Sequence[str]]) -> list[str]:
    """:func:`identifier` of each item, unique across ``items`` (distinct items assumed)."""
    names = [identifier(*item) for item in items]
    taken = Counter(names)
    return [
        name if taken[name] == 1 else f"{name}_{_digest(list(item))}"
        for name, item in zip(names, items, strict=True)
    ]
