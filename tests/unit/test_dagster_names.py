"""Dagster names from any source name: valid, readable, distinct."""

from __future__ import annotations

import pytest
from dagster._core.definitions.utils import is_valid_name

from dagster_defs.names import identifier, key_part, unique_identifiers

pytestmark = pytest.mark.unit

NAMES = [
    "orders", "Orders", "ORDERS", "a b", "a_b", "A_B", "a-b", "a.b", "it's", 'say "hi"',
    "back`tick", "a|b", "user@host", "price$", "[x]", "Ünïcödé", "表", "select", "input",
    "a__b", "", "_", "x/y", "per%cent",
]  # fmt: skip


def test_identifiers_are_valid_and_distinct() -> None:
    names = [identifier("shop", n) for n in NAMES]
    assert all(is_valid_name(n) for n in names), names
    assert len(set(names)) == len(NAMES)
    assert identifier("shop", "orders") == "shop__orders"  # readable when nothing changes
    assert identifier("shop", "Ünïcödé").startswith("shop__Unicode_")
    assert identifier("class") != "class"  # Dagster refuses Python keywords
    assert identifier("input") != "input"  # and a few names of its own


def test_unique_identifiers_separate_what_joins_alike() -> None:
    # ("a__b", "c") and ("a", "b__c") would both read a__b__c
    first, second = unique_identifiers([("a__b", "c"), ("a", "b__c")])
    assert first != second


def test_key_parts_keep_the_name_but_what_selection_cannot_quote() -> None:
    assert key_part("it's a [b]|c@d$") == "it's a [b]|c@d$"
    assert key_part("x/y") == "x%2Fy"
    assert key_part('say "hi"') == "say %22hi%22"
    assert key_part("per%cent") == "per%25cent"
    assert key_part("a*b\\c\nd") == "a%2Ab%5Cc%0Ad"
    assert len({key_part(n) for n in NAMES}) == len(NAMES)
