"""Canal's file formats as Canal reads them: Java ``.properties`` files and table filter regexes.

Canal loads its properties with ``java.util.Properties.load(InputStream)``, which reads
ISO-8859-1 (its line and escape rules: :mod:`cdc_platform.config.java_properties`); files
written on Chinese desktops often carry GBK comments, and editors add a UTF-8 byte-order mark.
A file is read here as UTF-8 when it is UTF-8 (a BOM is dropped), else as ISO-8859-1 as Canal
reads it, so no such file fails to import.

Canal splits ``canal.instance.filter.regex`` at commas outside ``{}``, ``[]`` and ``()`` (a
backslash escapes the next character), so ``shop\\.item_\\d{1,3}`` stays one pattern, and
matches the lower-cased ``schema.table`` against each pattern in full, case-insensitively.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from cdc_platform.config.java_properties import parse_properties
from cdc_platform.errors import ConfigError

__all__ = [
    "LayeredProperties",
    "PropertiesFile",
    "read_properties",
    "read_properties_file",
    "split_filter_regex",
]

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


class LayeredProperties:
    """canal.properties under an instance.properties, remembering where each key came from."""

    def __init__(self, *files: PropertiesFile) -> None:
        self._files = files

    def _file(self, key: str) -> PropertiesFile | None:
        for props in reversed(self._files):
            if key in props.values:
                return props
        return None

    def get(self, key: str) -> str:
        """The key's value without surrounding blanks ("" when no file has it)."""
        props = self._file(key)
        return props.values[key].strip() if props is not None else ""

    def where(self, key: str) -> str:
        """``<file> line <n>: <key>`` for messages (the file the value comes from)."""
        props = self._file(key)
        if props is None:
            return key
        line = props.lines.get(key)
        return f"{props.path}{f' line {line}' if line else ''}: {key}"

    def number(self, key: str, convert: Callable[[str], int] = int) -> int | None:
        """The key's integer value, None when empty; a clear error naming file and key."""
        value = self.get(key)
        if not value:
            return None
        try:
            return convert(value)
        except ValueError:
            raise ConfigError(f"{self.where(key)} must be a whole number, got {value!r}") from None

    def names(self) -> set[str]:
        """Every key of every file."""
        return {key for props in self._files for key in props.values}


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
    try:
        values, lines = parse_properties(text)
    except ConfigError as exc:
        raise ConfigError(f"{path} {exc}") from None
    return PropertiesFile(path, values, encoding, lines)


def read_properties(text: str) -> dict[str, str]:
    """Java ``.properties`` text as a dict, by Java's rules (:mod:`java_properties`).

    Raises:
        ConfigError: a malformed ``\\uXXXX`` escape (Java refuses such a file too).
    """
    return parse_properties(text)[0]


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
