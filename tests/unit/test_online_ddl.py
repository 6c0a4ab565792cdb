"""The transient tables of pt-online-schema-change and gh-ost: the name rule, what the source
captures of them, the swap that ends them and when it needs no re-read."""

from __future__ import annotations

import pytest

from cdc_platform.backfill.reread_list import tables_to_reread
from cdc_platform.config import SourceConfig
from cdc_platform.coordination.table_catalog import Catalog, CatalogTable, without_transient
from cdc_platform.source.filters import TableFilter
from cdc_platform.source.online_ddl import Transient, transient_table
from cdc_platform.source.stream.swaps import shadow_streamed, swapped_in_shadow

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("_orders_new", Transient("new", "orders")),
        ("__orders_new", Transient("new", "orders")),  # pt-osc: the name was taken
        ("_orders_old", Transient("old", "orders")),
        ("_order_items_gho", Transient("gho", "order_items")),
        ("_orders_ghc", Transient("ghc", "orders")),
        ("_orders_del", Transient("del", "orders")),
        ("_orders_20261204193100_del", Transient("del", "orders")),  # --timestamp-old-table
        ("orders_new", None),
        ("_orders_newer", None),
        ("orders", None),
    ],
)
def test_transient_names(name: str, expected: Transient | None) -> None:
    assert transient_table(name) == expected


def test_transient_tables_are_followed_or_ignored_only_beside_a_captured_table() -> None:
    filt = TableFilter([r"shop\..*"], [r"shop\.secret"])
    assert filt.matches("shop", "orders")
    for name in ("_orders_new", "_orders_old", "_orders_gho", "_orders_ghc", "_orders_del"):
        assert not filt.matches("shop", name)  # no table of its own
        assert filt.transient("shop", name)
    for name in ("_orders_new", "_orders_gho"):
        assert filt.follows("shop", name)
        assert filt.captures("shop", name)
    for name in ("_orders_old", "_orders_ghc", "_orders_del"):
        assert not filt.captures("shop", name)
    # its table excluded: an ordinary table, which the exclude pattern does not name
    assert filt.matches("shop", "_secret_new")
    assert not filt.follows("shop", "_secret_new")
    # beside a table the filters do not capture it is a user's table like any other
    only = TableFilter([r"shop\.orders", r"shop\._invoices_new"])
    assert only.matches("shop", "_invoices_new")
    assert not only.transient("shop", "_invoices_new")


@pytest.mark.parametrize(
    ("statement", "table", "shadow"),
    [
        ("RENAME TABLE `shop`.`orders` TO `shop`.`_orders_old`, `shop`.`_orders_new` TO "
         "`shop`.`orders`", "orders", "_orders_new"),
        ("rename /* gh-ost */ table `shop`.`orders` to `shop`.`_orders_del`, "
         "`shop`.`_orders_gho` to `shop`.`orders`", "orders", "_orders_gho"),
        ("alter /* gh-ost */ table `shop`.`_orders_gho` rename `shop`.`orders`", "orders",
         "_orders_gho"),
        ("RENAME TABLE orders TO orders_2, _invoices_new TO orders", "orders", None),
        ("RENAME TABLE a TO b", "b", None),
        ("ALTER TABLE orders ADD COLUMN c INT", "orders", None),
    ],
)  # fmt: skip
def test_the_swap_names_its_shadow(statement: str, table: str, shadow: str | None) -> None:
    assert swapped_in_shadow(statement, "shop", table) == shadow


def test_a_shadow_streamed_only_from_its_create_with_rows_after_it() -> None:
    create = ("ddl", "create /* gh-ost */ table `shop`.`_orders_gho` like `shop`.`orders`")
    alter = ("ddl", "ALTER TABLE `shop`.`_orders_gho` ADD COLUMN c INT DEFAULT 1")
    row = ("c", None)
    assert shadow_streamed([create, alter, row, ("u", None)])
    assert not shadow_streamed([row, alter])  # started while the tool was copying
    assert not shadow_streamed([create, alter])  # an empty copy: re-read (cheap)
    assert not shadow_streamed([create, row, ("ddl", "DROP TABLE _orders_gho"), create])
    assert not shadow_streamed([("ddl", "CREATE TEMPORARY TABLE _orders_gho (id INT)"), row])


def test_the_shadows_own_ddl_lists_no_re_read_of_it() -> None:
    statements = [("shop", "_orders_new", "ALTER TABLE `shop`.`_orders_new` ADD c INT DEFAULT 7")]
    assert tables_to_reread(statements) == ["shop._orders_new"]  # the plain rule would
    filt = TableFilter([r"shop\..*"])
    assert tables_to_reread(r for r in statements if not filt.follows(r[0], r[1])) == []


def test_a_catalog_loses_the_transient_tables() -> None:
    source = SourceConfig(
        user="cdc",
        password_env="CDC_TEST_PASSWORD",
        server_id=7,
        include_tables=[r"shop\.orders", r"shop\._x_del"],
    )
    names = ["orders", "_orders_new", "_orders_old", "_orders_gho", "_orders_ghc", "_x_del"]
    catalog = Catalog("d", tuple(CatalogTable("shop", n) for n in names), ("note",))
    kept = without_transient(catalog, source)
    assert [t.table for t in kept.tables] == ["orders", "_x_del"]
    assert kept.problems == ("note",)
