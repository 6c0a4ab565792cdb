"""Java ``.properties`` text read by the rules of ``java.util.Properties.load``, which Canal
uses for its files, so an imported key and value are the ones Canal sees.

Python's ``str.splitlines`` is not that reader: it also ends lines at ``\\x0b``, ``\\x0c``,
``\\x1c``-``\\x1e``, ``\\x85``, ``\\u2028`` and ``\\u2029``, and ``str.strip`` removes more
than Java's blanks; a GBK comment read as ISO-8859-1 (as Canal reads it) holds ``\\x85`` and
would give keys Canal never sees. The rules, as Java's ``LineReader`` and ``loadConvert``:

* a natural line ends at ``\\n``, ``\\r`` or ``\\r\\n``; nothing else ends a line;
* blanks are space, tab and form feed; they are skipped at the start of each natural line;
  lines holding only blanks are skipped;
* a line whose first non-blank is ``#`` or ``!`` is a comment (a backslash at its end
  continues nothing);
* an odd number of backslashes at the end continues the logical line on the next natural
  line (its leading blanks dropped); a comment sign there is text; an empty line ends it;
* the key ends at the first unescaped ``=``, ``:`` or blank; blanks, then one ``=`` or ``:``,
  then blanks separate it from the value; the value keeps its trailing blanks;
* escapes: ``\\t``, ``\\n``, ``\\r``, ``\\f``, ``\\uXXXX`` (four hex digits, else the file
  does not load: an error here), any other escaped character is itself.
"""

from __future__ import annotations

from cdc_platform.errors import ConfigError

__all__ = ["BLANKS", "parse_properties"]

BLANKS = " \t\f"
"""What Java's reader counts as white space between and around keys and values."""
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_HEX = frozenset("0123456789abcdefABCDEF")


def _natural_lines(text: str) -> list[str]:
    """``text`` cut at ``\\r\\n``, ``\\r`` and ``\\n`` only (the last line may be empty)."""
    return text.replace("\r\n", "\n").replace("\r", "\n").split("\n")


def _odd_backslashes(line: str) -> bool:
    return (len(line) - len(line.rstrip("\\"))) % 2 == 1


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """(first line number, text) of each key line, comments and blank lines dropped and
    continuations joined, as Java's ``LineReader`` returns them."""
    out: list[tuple[int, str]] = []
    pending: str | None = None
    start = 0
    for number, raw in enumerate(_natural_lines(text), start=1):
        line = raw.lstrip(BLANKS)
        if pending is None:
            if not line or line[0] in "#!":
                continue
            start, pending = number, ""
        if _odd_backslashes(line):  # (an empty or blank line ends a continued one)
            pending += line[:-1]
            continue
        out.append((start, pending + line))
        pending = None
    if pending is not None:  # the file ended on a continuation
        out.append((start, pending))
    return out


def _unescape(text: str, number: int) -> str:
    out: list[str] = []
    index = 0
    while index < len(text):
        char = text[index]
        if char != "\\" or index + 1 >= len(text):
            out.append(char)
            index += 1
            continue
        escaped = text[index + 1]
        if escaped == "u":
            digits = text[index + 2 : index + 6]
            if len(digits) < 4 or not set(digits) <= _HEX:
                raise ConfigError(
                    f"line {number}: malformed \\uXXXX escape {text[index : index + 6]!r} "
                    "(Java's Properties refuse the file: write four hex digits)"
                )
            out.append(chr(int(digits, 16)))
            index += 6
            continue
        out.append(_ESCAPES.get(escaped, escaped))
        index += 2
    return "".join(out)


def _split(line: str, number: int) -> tuple[str, str]:
    index = 0
    while index < len(line) and line[index] not in "=:" + BLANKS:
        index += 2 if line[index] == "\\" else 1
    key, rest = line[:index], line[index:].lstrip(BLANKS)
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(BLANKS)
    return _unescape(key, number), _unescape(rest, number)


def parse_properties(text: str) -> tuple[dict[str, str], dict[str, int]]:
    """The keys and values of ``text`` (the last of a repeated key wins), and the line each
    key starts on.

    Raises:
        ConfigError: a malformed ``\\uXXXX`` escape (naming the line; Java refuses the file).
    """
    values: dict[str, str] = {}
    lines: dict[str, int] = {}
    for number, line in _logical_lines(text):
        key, value = _split(line, number)
        values[key] = value
        lines[key] = number
    return values, lines
