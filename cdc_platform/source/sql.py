"""SQL text built from names the source or the configuration supplies.

Table and column names are data: a table may be called ``we`ird.t ab``. Every name that goes
into SQL text goes through :func:`quote_identifier`; values go through query parameters. pymysql
substitutes parameters with Python's ``%`` operator whenever ``args`` is given (even ``()``),
so SQL text executed with parameters passes its quoted names through :func:`format_safe`
(a column may be called ``50%``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

__all__ = [
    "format_safe",
    "qualified_name",
    "quote_identifier",
    "split_top_level",
    "strip_comments",
]


def quote_identifier(name: str) -> str:
    """``name`` as a MySQL/MariaDB quoted identifier (backticks doubled)."""
    return "`" + name.replace("`", "``") + "`"


def qualified_name(db: str, table: str) -> str:
    """```db`.`table``` with both parts quoted."""
    return f"{quote_identifier(db)}.{quote_identifier(table)}"


def format_safe(sql: str) -> str:
    """SQL text (quoted names) made literal for pymysql's ``%`` parameter substitution."""
    return sql.replace("%", "%%")


def split_top_level(text: str) -> Iterator[str]:
    """Split on commas outside parentheses, quotes and backticks."""
    depth, quote, start, i = 0, "", 0, 0
    while i < len(text):
        ch = text[i]
        if quote:
            if ch == "\\" and quote != "`":
                i += 1
            elif ch == quote:
                quote = ""
        elif ch in "'\"`":
            quote = ch
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            yield text[start:i].strip()
            start = i + 1
        i += 1
    tail = text[start:].strip()
    if tail:
        yield tail


_LEXEMES = re.compile(
    r"`(?:[^`]|``)*`|'(?:[^'\\]|\\.|'')*'|\"(?:[^\"\\]|\\.|\"\")*\""
    r"|/\*M?!\d*|/\*.*?\*/|\*/|(?:--(?=\s)|#)[^\n]*",
    re.DOTALL,
)
"""What :func:`strip_comments` looks at: quoted text (kept whole), executable comments' marks,
comments."""


def strip_comments(sql: str) -> str:
    """``sql`` without comments. The body of an executable comment (``/*!50100 ...*/``,
    MariaDB's ``/*M!100100 ...*/``) stays: the server runs it. Quoted text is kept whole (a
    ``#`` or ``--`` in a string or a name starts no comment)."""
    executable = False

    def lexeme(match: re.Match[str]) -> str:
        nonlocal executable
        text = match.group(0)
        if text[0] in "`'\"" or (text == "*/" and not executable):
            return text
        if text == "*/" or text.startswith(("/*!", "/*M!")):
            executable = text != "*/"
        return " "

    return _LEXEMES.sub(lexeme, sql).strip()
