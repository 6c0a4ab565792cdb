"""Task ids of a destination's DAGs: one per table, valid for Airflow, never shared by two
tables (pure logic: no servers)."""

from __future__ import annotations

import itertools

import pytest
from airflow.sdk.definitions._internal.node import validate_key

from cdc_airflow.dags import task_id

pytestmark = pytest.mark.unit

LOOK_ALIKES = [
    ("app", "user_log"),
    ("app_user", "log"),
    ("app.user", "log"),
    ("app", "user.log"),
    ("app", "user-log"),
    ("App", "user_log"),
    ("app", "user log"),
    ("app", "usér_log"),
    ("app", "user_lóg"),
    ("my.db", "orders"),
    ("my", "db.orders"),
    ("my_db", "orders"),
    ("a" * 64, "b" * 64),
    ("é" * 64, "ü" * 64),
    ("x", "__"),
    ("x_", "_"),
]


def test_plain_names_keep_their_task_id() -> None:
    """Ids of tables whose names need no change stay as they were (task history keeps)."""
    assert task_id("mirror", "shop", "orders") == "mirror_shop_orders"
    assert task_id("history", "shop", "order_items") == "history_shop_order_items"
    assert task_id("mirror", "shop-2", "Orders") == "mirror_shop-2_Orders"


def test_look_alike_tables_get_distinct_valid_ids() -> None:
    """`app.user_log` and `app_user.log` (and every other pair here) were one id."""
    for prefix in ("mirror", "history"):
        ids = [task_id(prefix, db, table) for db, table in LOOK_ALIKES]
        for one, other in itertools.combinations(zip(ids, LOOK_ALIKES, strict=True), 2):
            assert one[0] != other[0], (one, other)
        for made in ids:
            validate_key(made)  # letters, digits, `-`, `_`, `.`; no `..`; 250 at most
            assert made.isascii()
