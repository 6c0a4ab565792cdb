"""The one resolution of ``db.table`` names (pure part: no server)."""

from __future__ import annotations

import pytest

from cdc_platform.errors import SnapshotError
from cdc_platform.source.filters import TableFilter
from cdc_platform.source.table_names import any_split_captured, choose_split, table_name_splits

pytestmark = pytest.mark.unit


def test_every_meaning_of_a_name_first_dot_first() -> None:
    assert table_name_splits("a.b") == [("a", "b")]
    assert table_name_splits("my.db.t") == [("my", "db.t"), ("my.db", "t")]
    assert table_name_splits("a..b") == [("a", ".b"), ("a.", "b")]
    for bad in ("ab", ".ab", "ab.", ""):
        assert table_name_splits(bad) == []
        with pytest.raises(SnapshotError, match=r"is not `db\.table`"):
            choose_split(bad, ())


def test_the_split_a_table_exists_for_wins_else_the_first_dot() -> None:
    assert choose_split("my.db.t", {("my.db", "t")}) == ("my.db", "t")
    assert choose_split("my.db.t", {("my", "db.t")}) == ("my", "db.t")
    assert choose_split("my.db.t", ()) == ("my", "db.t")
    both = {("my", "db.t"), ("my.db", "t")}
    assert choose_split("my.db.t", both) == ("my", "db.t")
    assert choose_split("a.b.c.d", {("a.b", "c.d"), ("a.b.c", "d")}) == ("a", "b.c.d")


def test_a_dotted_database_named_like_a_system_schema_may_be_captured() -> None:
    """`mysql.app`.`t` is a user's table; the system schema `mysql` never is."""
    captured = TableFilter([r"mysql\.app\..*"]).matches
    assert not captured("mysql", "app.t")
    assert captured("mysql.app", "t")
    assert any_split_captured("mysql.app.t", captured)
    assert not any_split_captured("mysql.user", captured)
    assert not any_split_captured("nodot", captured)
