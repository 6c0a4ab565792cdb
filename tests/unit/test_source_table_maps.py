"""Table maps: column charsets come from the collation ids, never from a guess."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from cdc_platform.errors import SourceError
from cdc_platform.source.table_maps import _charsets, _labels_in
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
    assert _charsets(event, True, "db", "t") == [None, "utf16", "utf32", "ucs2", "cp1250"]


def test_an_unknown_collation_id_is_refused() -> None:
    event = _event([FieldType.VARCHAR], [4000], [])
    with pytest.raises(SourceError, match=r"db\.t\.c0 has collation id 4000"):
        _charsets(event, True, "db", "t")


def test_enum_labels_are_decoded_in_their_charset() -> None:
    # The library decodes label bytes as UTF-8: latin1 'Ã©' arrives as 'é', utf16 'y' as '\0y'.
    assert _labels_in("latin1", ["é", "a"]) == ("Ã©", "a")
    assert _labels_in("utf16", ["\x00y"]) == ("y",)
    assert _labels_in("utf8mb4", ["é"]) == ("é",)
    # cp1250 X'C281' (valid UTF-8, so the library hands it over) has the undefined byte 0x81:
    # '' so the label comes from information_schema, as the snapshot reads it.
    assert _labels_in("cp1250", ["\x81"]) == ("",)
