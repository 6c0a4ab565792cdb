"""The resume position kept as one integer (an app transaction) through log cleanup."""

from __future__ import annotations

import pytest

from cdc_platform.events import PreparedXa, ResumePosition, ServerIdentity
from cdc_platform.sink.position_slot import NO_SLOT, decode_slot, encode_slot

pytestmark = pytest.mark.unit

SERVER = ServerIdentity(1, gtid_domain_id=0)


def test_a_plain_position_survives_in_the_binlog_of_the_last_row() -> None:
    row = ResumePosition("mysql-bin.000009", 4000, "0-1-7", server=SERVER, filters="f")
    newer = ResumePosition("mysql-bin.000011", 123_456, "0-1-9")
    found = decode_slot(encode_slot(newer), row)
    assert found is not None
    assert (found.file, found.pos, found.gtid_set) == ("mysql-bin.000011", 123_456, None)
    assert (found.server, found.filters) == (SERVER, "f")
    # the same position as the row, or an older one: the row's own (with its GTID state) wins
    assert decode_slot(encode_slot(row), row) is None
    older = ResumePosition("mysql-bin.000009", 40)
    assert decode_slot(encode_slot(older), row) is None
    assert decode_slot(None, row) is None


def test_positions_that_do_not_fit_keep_nothing() -> None:
    assert encode_slot(ResumePosition("mysql-bin.000001", 4, skip_events=3)) == NO_SLOT
    xa = PreparedXa("X'01',X'',1", "mysql-bin.000001", 4, None)
    assert encode_slot(ResumePosition("mysql-bin.000001", 400, xa_prepared=(xa,))) == NO_SLOT
    assert encode_slot(ResumePosition("binlog", 400)) == NO_SLOT
    assert encode_slot(ResumePosition("mysql-bin.000001", 1 << 41)) == NO_SLOT
    assert decode_slot(NO_SLOT, ResumePosition("mysql-bin.000001", 4)) is None
