"""How FLOAT and DOUBLE key values are bound back (the servers' side is in
tests/integration/test_keyset_reader.py and test_float_keys.py)."""

from __future__ import annotations

import json
import struct
from decimal import Decimal

import pytest

from cdc_platform.source.reading.key_forms import key_form
from cdc_platform.source.reading.row_keys import decode_key, encode_key

pytestmark = pytest.mark.unit


def _single(text: str) -> float:
    exact: float = struct.unpack("<f", struct.pack("<f", float(text)))[0]
    return exact


@pytest.mark.parametrize("text", ["1.1", "0.1", "123456.789", "1e-40", "3.4028235e38", "-2.5"])
def test_every_form_of_a_float_key_binds_as_its_single_precision_value(text: str) -> None:
    form = key_form("`k`", "float", {})
    assert form.select == "CAST(`k` AS DOUBLE)"
    assert form.value is not None
    exact = _single(text)
    through_file = decode_key(json.loads(json.dumps(encode_key([exact]))))[0]
    # the driver's double, the progress file's Decimal, the change log's shortest text
    for value in (exact, through_file, float(text), Decimal(text)):
        assert form.value(value) == exact
        assert isinstance(form.value(value), float)
    if text != "-2.5":  # exact in both precisions
        assert exact != float(text)  # 1.1 as a single is not the double 1.1


@pytest.mark.parametrize("value", [5e-324, -1.7976931348623157e308, 0.1, 1e300])
def test_a_double_key_from_the_progress_file_binds_as_a_float(value: float) -> None:
    form = key_form("`k`", "double", {})
    assert form.value is not None
    stored = decode_key(json.loads(json.dumps(encode_key([value]))))[0]
    assert isinstance(stored, Decimal)  # what pymysql would write out in full
    assert form.value(stored) == value
    assert isinstance(form.value(stored), float)
