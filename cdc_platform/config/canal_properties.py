"""Canal's file formats as Canal reads them: Java ``.properties`` files and table filter regexes.

Canal loads its properties with ``java.util.Properties.load(InputStream)``, which reads
ISO-8859-1; files written on Chinese desktops often carry GBK comments, and editors add a UTF-8
byte-order mark. A file is read here as UTF-8 when it is UTF-8 (a BOM is dropped), else as
ISO-8859-1 as Canal reads it, so no such file fails to import.

Canal splits ``canal.instance.filter.regex`` at commas outside ``{}``, ``[]`` and ``()`` (a
backslash escapes the next character), so ``shop\\.item_\\d{1,3}`` stays one pattern, and
matches the lower-cased ``schema.table`` against each pattern in full, case-insensitively.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from cdc_platform.errors import ConfigError

__all__ = ["PropertiesFile", "read_properties", "read_properties_file", "split_filter_regex"]

_BOM = b"\xef\xbb\xbf"


@dataclass(frozen=True)
class PropertiesFile:
    """One properties file as read: its keys and how its bytes were decoded."""

    path: Path
    values: dict[str, str]
    encoding: str
    """``utf-8`` or ``iso-8859-1`` (Canal's own reading)."""
    lines: dict[str, int] = field(default_factory=dict)
    """Key -> the line it starts on (for messages)."""


def read_properties_file(path: Path) -> PropertiesFile:
    """Read ``path`` as Canal would (see the module docstring).

    Raises:
        ConfigError: the file cannot be read.
    """
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    raw = raw.removeprefix(_BOM)
    try:
        text, encoding = raw.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        text, encoding = raw.decode("iso-8859-1"), "iso-8859-1"
    values, lines = _parse(text)
    return PropertiesFile(path, values, encoding, lines)


def read_properties(text: str) -> dict[str, str]:
    """Java ``.properties`` text as a dict: ``key=value``, ``key: value`` or ``key value``;
    ``#``/``!`` comments; a trailing backslash continues a line; backslash escapes
    (``\\\\``, ``\\t``, ``\\n``, ``\\uXXXX``, any other escaped character is itself)."""
    return _parse(text)[0]


def _parse(text: str) -> tuple[dict[str, str], dict[str, int]]:
    out: dict[str, str] = {}
    lines: dict[str, int] = {}
    logical = ""
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.lstrip()
        if not logical and (not line or line[0] in "#!"):
            continue
        if not logical:
            start = number
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:
            logical += line[:-1]
            continue
        logical += line
        key, value = _split(logical)
        out[key] = value
        lines[key] = start
        logical = ""
    if logical:
        key, value = _split(logical)
        out[key] = value
        lines[key] = start
    return out, lines


def _split(line: str) -> tuple[str, str]:
    index = 0
    while index < len(line):
        char = line[index]
        if char == "\\":
            index += 2
            continue
        if char in "=: \t\f":
            break
        index += 1
    key = line[:index]
    rest = line[index:].lstrip(" \t\f")
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(" \t\f")
    return _unescape(key), _unescape(rest).rstrip()


def _unescape(text: str) -> str:
    out: list[str] = []
    index = 0
    while index < len(text):
        char = text[index]
        if char != "\\" or index + 1 >= len(text):
            out.append(char)
            index += 1
            continue
        nxt = text[index + 1]
        if nxt == "u" and re.fullmatch(r"[0-9a-fA-F]{4}", text[index + 2 : index + 6]):
            out.append(chr(int(text[index + 2 : index + 6], 16)))
            index += 6
            continue
        out.append({"t": "\t", "n": "\n", "r": "\r", "f": "\f"}.get(nxt, nxt))
        index += 2
    return "".join(out)


_OPEN = {"{": "}", "[": "]", "(": ")"}


def split_filter_regex(value: str) -> list[str]:
    """Canal's split of a filter value into patterns: at commas outside ``{}``, ``[]`` and
    ``()``, a backslash escaping the next character; empty parts are dropped."""
    parts: list[str] = []
    depth = {"{": 0, "[": 0, "(": 0}
    closing = {v: k for k, v in _OPEN.items()}
    start = 0
    index = 0
    while index < len(value):
        char = value[index]
        if char == "\\" and index + 1 < len(value):
            index += 2
            continue
        if char in depth:
            depth[char] += 1
        elif char in closing and depth[closing[char]] > 0:
            depth[closing[char]] -= 1
        elif char == "," and not any(depth.values()):
            if index > start:
                parts.append(value[start:index])
            start = index + 1
        index += 1
    if start < len(value):
        parts.append(value[start:])
    return [part.strip() for part in parts if part.strip()]
