"""Java ``.properties`` text read by the rules of ``java.util.Properties.load`` (Canal's own
reader): what ends a line, continuations, comments, separators, escapes. The same cases are
compared with a real Java in tests/integration/test_java_properties.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdc_platform.config.canal_import import import_canal
from cdc_platform.config.canal_properties import read_properties, read_properties_file
from cdc_platform.config.java_properties import parse_properties
from cdc_platform.errors import ConfigError

pytestmark = pytest.mark.unit

GBK_COMMENT = "# 源库匯率表 (the source's exchange-rate table)\n".encode("gbk")
"""A GBK comment: 匯 is the bytes 85 52, and 0x85 read as ISO-8859-1 is NEL, a line break
for ``str.splitlines`` but not for Java."""

CASES: dict[str, tuple[bytes, dict[str, str]]] = {
    "gbk comment": (
        GBK_COMMENT + b"canal.instance.dbUsername=canal\n",
        {"canal.instance.dbUsername": "canal"},
    ),
    "controls that are no line end": (
        b"a=1\x0b2\nb=x\x0cy\nc=\x1c\x1d\x1e\nd=\x85e=f\n",
        {"a": "1\x0b2", "b": "x\x0cy", "c": "\x1c\x1d\x1e", "d": "\x85e=f"},
    ),
    "line ends": (
        b"a=1\rb=2\r\nc=3\n\r\nd=4",
        {"a": "1", "b": "2", "c": "3", "d": "4"},
    ),
    "blanks and comments": (
        b"  # comment\n\t! comment too\n\x0ckey = v  \n   \n  k2:v2\n#c\\\nk3 v3\n",
        {"key": "v  ", "k2": "v2", "k3": "v3"},
    ),
    "continuations": (
        b"a=1\\\n   2\\\r\n\t3\nb=x\\\\\nc=y\\\\\\\n  z\nd=p\\\n#q\ne=s\\\n\nf=t\\",
        {"a": "123", "b": "x\\", "c": "y\\z", "d": "p#q", "e": "s", "f": "t"},
    ),
    "separators": (
        b"a:b\nc d\ne  =  f\ng==h\ni =:j\nk\nl\\ m=n\no\\=p=q\nr\\:s:t\n=u\n",
        {
            "a": "b",
            "c": "d",
            "e": "f",
            "g": "=h",
            "i": ":j",
            "k": "",
            "l m": "n",
            "o=p": "q",
            "r:s": "t",
            "": "u",
        },
    ),
    "escapes": (
        b"a=\\u00e9\\u4E2D\\t\\n\\r\\f\\q\\\\\nb\\u0041=c\n",
        {"a": "\xe9\u4e2d\t\n\r\fq\\", "bA": "c"},
    ),
    "non-breaking space is text": (
        b"\xa0k=v\xa0\n",
        {"\xa0k": "v\xa0"},
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_java_properties_rules(name: str) -> None:
    raw, expected = CASES[name]
    assert read_properties(raw.decode("iso-8859-1")) == expected


def test_line_numbers_count_java_line_ends_only() -> None:
    text = "# a\x85b\n\ra=1\\\n 2\r\nb=\u2028\n"
    values, lines = parse_properties(text)
    assert values == {"a": "12", "b": "\u2028"}
    assert lines == {"a": 3, "b": 5}


def test_a_malformed_unicode_escape_is_refused_with_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "instance.properties"
    path.write_bytes(b"a=1\nb=\\u12g4\n")
    with pytest.raises(ConfigError, match=r"instance\.properties line 2: malformed \\uXXXX"):
        read_properties_file(path)


def test_a_gbk_instance_file_gets_no_bogus_keys(tmp_path: Path) -> None:
    """Read as Canal reads it (ISO-8859-1: the file is not UTF-8), the comment stays one."""
    canal = tmp_path / "canal"
    (canal / "example").mkdir(parents=True)
    (canal / "canal.properties").write_bytes(GBK_COMMENT + b"canal.destinations=example\n")
    (canal / "example" / "instance.properties").write_bytes(
        GBK_COMMENT
        + b"canal.instance.master.address=127.0.0.1:3306\n"
        + b"canal.instance.dbUsername=canal\ncanal.instance.dbPassword=pw\n"
    )
    props = read_properties_file(canal / "example" / "instance.properties")
    assert props.encoding == "iso-8859-1"
    assert sorted(props.values) == [
        "canal.instance.dbPassword",
        "canal.instance.dbUsername",
        "canal.instance.master.address",
    ]
    result = import_canal(canal, tmp_path / "conf")
    assert result.errors == {}
    assert all(keys == [] for keys in result.not_imported.values()), result.not_imported
