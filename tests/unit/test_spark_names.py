"""Mirror location names: plain names unchanged, the encoding injective and path-safe."""

from __future__ import annotations

import itertools
import re

import pytest

from cdc_platform.spark.names import engine_columns, location_name, quote_identifier

pytestmark = pytest.mark.unit


def test_plain_names_keep_their_location() -> None:
    assert location_name("shop", "items") == "shop.items"
    assert location_name("t_db$1", "Order-Lines") == "t_db$1.Order-Lines"


def test_look_alike_names_get_distinct_locations() -> None:
    assert location_name("a.b", "c") == "a@2Eb.c"
    assert location_name("a", "b.c") == "a.b@2Ec"
    assert location_name("a@2Eb", "c") != location_name("a.b", "c")
    assert location_name("é", "x?y") == "@C3@A9.x@3Fy"


def test_encoding_is_injective_and_path_safe() -> None:
    alphabet = ["a", ".", "@", "2E", "`", " ", "/", "é", "%", "?"]
    parts = ["".join(p) for n in range(3) for p in itertools.product(alphabet, repeat=n)]
    seen: dict[str, tuple[str, str]] = {}
    for db, table in itertools.product(parts[:120], repeat=2):
        name = location_name(db, table)
        assert re.fullmatch(r"[A-Za-z0-9_$@-]*\.[A-Za-z0-9_$@-]*", name), name
        assert seen.setdefault(name, (db, table)) == (db, table)


def test_quote_identifier_doubles_backticks() -> None:
    assert quote_identifier("a`b.c") == "`a``b.c`"


def test_engine_columns_never_equal_a_source_column_in_any_case() -> None:
    assert engine_columns(["id", "pk", "seq", "op"]).deleted == "_cdc_deleted"  # usual names
    roles = ["deleted", "seq", "kind", "first_kind", "hash", "chunk", "delta", "pk", "key"]
    for names in (
        ["_cdc_deleted"],
        ["_CDC_SEQ", "_cdc__x"],
        ["_cdc_", "_cdc__", "_cdc___"],
        ["_Cdc_before_0", "x"],
    ):
        engine = engine_columns(names)
        made = [engine.of(r) for r in roles] + [engine.numbered("before", i) for i in range(3)]
        folded = {n.casefold() for n in names}
        assert not [m for m in made if m.casefold() in folded], (names, engine)
        assert not any(n.casefold().startswith(engine.prefix.casefold()) for n in names)
