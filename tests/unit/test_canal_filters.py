"""Canal's table filter values split and matched as a Canal server does."""

from __future__ import annotations

import re

import pytest

from cdc_platform.config.canal_properties import split_filter_regex

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("value", "parts"),
    [
        (r"s1\..*,s2\..*", [r"s1\..*", r"s2\..*"]),
        (r"shop\.order_item_\d{1,3}", [r"shop\.order_item_\d{1,3}"]),
        (r"a\.t_\d{1,2},b\.u_\d+", [r"a\.t_\d{1,2}", r"b\.u_\d+"]),
        (r"a\.(x,y),b\.[,;]z", [r"a\.(x,y)", r"b\.[,;]z"]),
        # an escaped brace opens nothing: the comma after it still splits
        (r"a\.x\{,b\.y", [r"a\.x\{", r"b\.y"]),
        (r"a\.x\,y", [r"a\.x\,y"]),
        (" a\\.x , ,b\\.y ,", [r"a\.x", r"b\.y"]),
        ("", []),
    ],
)
def test_commas_split_only_outside_groups(value: str, parts: list[str]) -> None:
    assert split_filter_regex(value) == parts


def test_quantifier_patterns_match_as_in_canal() -> None:
    patterns = [re.compile(p, re.IGNORECASE) for p in split_filter_regex(r"test\.order_\d{1,2}")]
    assert [bool(p.fullmatch(n)) for p in patterns for n in ("test.order_5", "test.order_42")] == [
        True,
        True,
    ]
    assert not any(p.fullmatch("test.order_123") for p in patterns)
    assert not any(p.fullmatch("test.order_") for p in patterns)
