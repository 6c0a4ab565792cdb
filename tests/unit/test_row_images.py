"""The written-out row writer gives the same key and image text as building each row's dict
and writing it, for any column names, values, conversions and keys."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cdc_platform.source.reading.row_images import rows_json
from cdc_platform.source.values import dumps
from cdc_platform.source.values.image_json import image_encoder

pytestmark = pytest.mark.unit

WRITE = image_encoder(True)


def reference(
    records: Sequence[Sequence[Any]],
    names: Sequence[str],
    converted: Sequence[tuple[int, Callable[[Any], Any]]],
    key: Sequence[int],
) -> tuple[list[str], list[str]]:
    """One dict per row, the conversions applied to it, then the key's dict."""
    pks, images = [], []
    for record in records:
        image = dict(zip(names, record, strict=False))
        for i, convert in converted:
            if record[i] is not None:
                image[names[i]] = convert(record[i])
        images.append(WRITE(image))
        pks.append(WRITE({names[i]: image[names[i]] for i in key}))
    return pks, images


def _upper(value: Any) -> Any:
    return str(value).upper()


def _tagged(value: Any) -> Any:
    return {"v": value}


NAMES = st.lists(
    st.text(min_size=1, max_size=12), min_size=1, max_size=8, unique=True
)  # quotes, braces, backslashes, any Unicode: names are values, never code
VALUES = st.one_of(
    st.none(),
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.text(max_size=20),
    st.booleans(),
)


@st.composite
def tables(draw: st.DrawFn) -> tuple[Any, ...]:
    names = draw(NAMES)
    width = len(names)
    converted = [
        (i, draw(st.sampled_from([_upper, _tagged])))
        for i in sorted(draw(st.sets(st.integers(0, width - 1), max_size=width)))
    ]
    key = draw(st.permutations(range(width)))[: draw(st.integers(1, min(3, width)))]
    extra = draw(st.integers(0, 2))  # values after the columns (a key read as itself)
    records = draw(st.lists(st.tuples(*[VALUES] * (width + extra)), max_size=6))
    return names, converted, key, records


@settings(max_examples=300, deadline=None)
@given(tables())
def test_the_written_out_rows_match_a_dict_per_row(table: tuple[Any, ...]) -> None:
    names, converted, key, records = table
    build = rows_json(names, converted, key, WRITE, [dumps(names[i]) for i in key])
    assert build(records) == reference(records, names, converted, key)


def test_an_integer_key_is_written_directly_and_any_other_through_the_encoder() -> None:
    build = rows_json(["id", "v"], [], [0], WRITE, [dumps("id")])
    pks, images = build([(5, "a", 5), (2**64 - 1, None, 0), ("x", 1, 0), (True, 1, 0)])
    assert pks == ['{"id":5}', '{"id":18446744073709551615}', '{"id":"x"}', '{"id":true}']
    assert images == [
        '{"id":5,"v":"a"}',
        '{"id":18446744073709551615,"v":null}',
        '{"id":"x","v":1}',
        '{"id":true,"v":1}',
    ]
