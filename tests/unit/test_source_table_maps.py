"""Table maps: column charsets come from the collation ids, never from a guess."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from cdc_platform.errors import SourceError
from cdc_platform.source.stream.table_maps import (
    Catalog,
    catalog_mismatch,
    changed_after,
    column_charsets,
    definition_differs,
    labels_in_charset,
)
from cdc_platform.source.values import FieldType

pytestmark = pytest.mark.unit


def _event(types: list[int], text_ids: list[int], label_ids: list[int]) -> Any:
    columns = [SimpleNamespace(name=f"c{i}", type=t) for i, t in enumerate(types)]
    metadata = SimpleNamespace(
        charset_collation_list=text_ids, enum_and_set_collation_list=label_ids
    )
    return SimpleNamespace(columns=columns, optional_metadata=metadata)


def test_uca1400_ids_give_their_charset_not_utf8() -> None:
    event = _event(
        [FieldType.LONG, FieldType.VARCHAR, FieldType.BLOB, FieldType.ENUM, FieldType.STRING],
        [2816, 3072, 26],
        [2560],
    )
    assert column_charsets(event, True, "db", "t") == [None, "utf16", "utf32", "ucs2", "cp1250"]


def test_an_unknown_collation_id_is_refused() -> None:
    event = _event([FieldType.VARCHAR], [4000], [])
    with pytest.raises(SourceError, match=r"db\.t\.c0 has collation id 4000"):
        column_charsets(event, True, "db", "t")


def test_enum_labels_are_decoded_in_their_charset() -> None:
    # The library decodes label bytes as UTF-8: latin1 'Ã©' arrives as 'é', utf16 'y' as '\0y'.
    assert labels_in_charset("latin1", ["é", "a"]) == ("Ã©", "a")
    assert labels_in_charset("utf16", ["\x00y"]) == ("y",)
    assert labels_in_charset("utf8mb4", ["é"]) == ("é",)
    # cp1250 X'C281' (valid UTF-8, so the library hands it over) has the undefined byte 0x81:
    # '' so the label comes from information_schema, as the snapshot reads it.
    assert labels_in_charset("cp1250", ["\x81"]) == ("",)


def test_a_catalog_without_a_needed_column_is_another_definition() -> None:
    catalog = Catalog(columns=("id", "c2", "n"), defined_at=2_000)
    assert catalog_mismatch(catalog, ("id", "c2", "n"), ("c2",)) is None
    why = catalog_mismatch(catalog, ("id", "c"), ("c",))
    assert why == (
        "its column(s) c are not in information_schema, whose columns are (id, c2, n); "
        "the binlog has (id, c)"
    )
    assert catalog_mismatch(Catalog(), ("id",), ("id",)) is None  # columns unknown


def test_columns_added_beside_the_needed_ones_keep_the_catalog_usable() -> None:
    """A JSON (LONGTEXT) column and an ADD COLUMN since the event: the JSON column's facts
    are found by name, so a catch-up across the ALTER goes on (with a warning)."""
    catalog = Catalog(columns=("id", "j", "w"), defined_at=2_000)
    assert catalog_mismatch(catalog, ("id", "j"), ("j",)) is None
    assert definition_differs(catalog, ("id", "j"))
    assert not definition_differs(catalog, ("id", "j", "w"))


def test_a_definition_changed_after_the_event_is_suspected() -> None:
    catalog = Catalog(columns=("id",), defined_at=2_000)
    assert changed_after(catalog, 1_999)
    assert not changed_after(catalog, 2_000)  # the same second: the ALTER's own batch
    assert not changed_after(Catalog(), 1)
