"""The platform inside a user's own Dagster project: a separate code location in a temporary
directory merges ``build_definitions(...)`` with its own asset on ``cdc/shop/orders``;
the ``dagster`` CLI materializes that mirror (one of the destination's two) and the user's
asset, which finds the table through the mirror's ``dagster/uri``; four more take the mirror as
an input (pyarrow, pandas, polars, a Spark DataFrame from the embedded engine), loaded by the
platform's IO manager."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from cdc_platform.config import load_config
from cdc_platform.sink.destination_lake import DestinationLake
from cdc_platform.testing.spark_changes import ChangeLogWriter, SourceTable, column

pytestmark = pytest.mark.integration

PROJECT = Path(__file__).resolve().parents[2]

USER_MODULE = '''
import json
import os

import dagster as dg
import pandas
import polars
import pyarrow
import pyspark.sql
from deltalake import DeltaTable

from dagster_defs import build_definitions

ORDERS = dg.AssetKey(["cdc", "shop", "orders"])


@dg.asset(deps=[ORDERS])
def open_orders(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
    """The user's own asset: reads the mirror where its materialization says it is."""
    event = context.instance.get_latest_materialization_event(ORDERS)
    uri = event.asset_materialization.metadata["dagster/uri"].value
    rows = DeltaTable(uri).to_pyarrow_table().to_pylist()
    opened = sorted(r["id"] for r in rows if r["status"] == "open")
    with open(os.environ["USER_OUTPUT"], "w") as out:
        json.dump({"uri": uri, "open": opened}, out)
    return dg.MaterializeResult(metadata={"open_orders": len(opened)})


@dg.asset(ins={"orders": dg.AssetIn(ORDERS)})
def order_ids(orders: pyarrow.Table) -> dg.MaterializeResult:
    """Takes the mirror as an input: the platform's IO manager loads it (pyarrow)."""
    _record("arrow_ids", sorted(orders.column("id").to_pylist()))
    return dg.MaterializeResult()


@dg.asset(ins={"orders": dg.AssetIn(ORDERS)})
def closed_count(orders: pandas.DataFrame) -> dg.MaterializeResult:
    """The same mirror as a pandas frame."""
    _record("pandas_closed", int((orders["status"] == "closed").sum()))
    return dg.MaterializeResult()


@dg.asset(ins={"orders": dg.AssetIn(ORDERS)})
def open_count(orders: polars.DataFrame) -> dg.MaterializeResult:
    """The same mirror as a polars frame."""
    _record("polars_type", type(orders).__module__ + "." + type(orders).__name__)
    _record("polars_open", sorted(orders.filter(polars.col("status") == "open")["id"].to_list()))
    return dg.MaterializeResult()


@dg.asset(ins={"orders": dg.AssetIn(ORDERS)})
def spark_ids(orders: pyspark.sql.DataFrame) -> dg.MaterializeResult:
    """The same mirror as a Spark DataFrame (the session platform.yaml's spark: chooses)."""
    _record("spark_type", isinstance(orders, pyspark.sql.DataFrame))
    _record("spark_ids", sorted(row["id"] for row in orders.select("id").collect()))
    return dg.MaterializeResult()


def _record(name, value):
    path = os.environ["USER_OUTPUT"] + "." + name
    with open(path, "w") as out:
        json.dump(value, out)


defs = dg.Definitions.merge(
    build_definitions(os.environ["USER_CDC_CONF"]),
    dg.Definitions(assets=[open_orders, order_ids, closed_count, open_count, spark_ids]),
)
'''


def test_a_users_project_materializes_a_mirror_and_its_own_asset_on_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CDC_SOURCE_PASSWORD", "unused")
    conf = tmp_path / "conf"
    (conf / "destinations" / "shop").mkdir(parents=True)
    (conf / "platform.yaml").write_text(f"lake_root: {tmp_path / 'lake'}\n")
    # Its source is down: the code location still loads, with the change log's tables.
    (conf / "destinations" / "shop" / "instance.yaml").write_text(
        "source: {host: 127.0.0.1, port: 9, user: cdc, password_env: CDC_SOURCE_PASSWORD, "
        "server_id: 7}\n"
    )
    orders = SourceTable(
        "shop", "orders", [column("id", "bigint", pk=True), column("status", "varchar", length=8)]
    )
    # A second table: selecting one mirror of a destination materializes that one only.
    items = SourceTable("shop", "items", [column("id", "bigint", pk=True)])
    log = ChangeLogWriter(DestinationLake.of(load_config(conf), "shop").change_log)
    now = datetime.now(UTC)
    log.commit(
        [orders.insert({"id": i, "status": "open" if i % 3 else "closed"}) for i in range(1, 10)]
        + [items.insert({"id": i}) for i in range(1, 4)],
        ts=now,
        committed_at=now,
    )
    log.commit(
        [orders.update((4,), status="closed"), orders.delete((5,))], ts=now, committed_at=now
    )

    project = tmp_path / "user_project"
    project.mkdir()
    (project / "user_defs.py").write_text(USER_MODULE)
    home = tmp_path / "dagster_home"
    home.mkdir()
    output = tmp_path / "open_orders.json"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(project), str(PROJECT)]),
        "DAGSTER_HOME": str(home),
        "USER_CDC_CONF": str(conf),
        "USER_OUTPUT": str(output),
    }
    done = subprocess.run(
        [sys.executable, "-m", "dagster", "asset", "materialize", "-m", "user_defs",
         "--select", "cdc/shop/orders,open_orders,order_ids,closed_count,open_count,"
         "spark_ids"],
        cwd=project, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    assert not (tmp_path / "lake" / "shop" / "mirror" / "shop.items").exists()
    found = json.loads(output.read_text())
    assert found["uri"] == str(tmp_path / "lake" / "shop" / "mirror" / "shop.orders")
    expected = sorted(row["id"] for row in orders.rows.values() if row["status"] == "open")
    assert found["open"] == expected
    assert 4 not in found["open"]
    assert 5 not in found["open"]
    # the assets that declared the mirror as an input got its current rows
    arrow_ids = json.loads(Path(f"{output}.arrow_ids").read_text())
    assert arrow_ids == sorted(key[0] for key in orders.rows)
    closed = sum(1 for row in orders.rows.values() if row["status"] == "closed")
    assert json.loads(Path(f"{output}.pandas_closed").read_text()) == closed
    polars_type = json.loads(Path(f"{output}.polars_type").read_text())
    assert polars_type == "polars.dataframe.frame.DataFrame"
    assert json.loads(Path(f"{output}.polars_open").read_text()) == expected
    assert json.loads(Path(f"{output}.spark_type").read_text()) is True
    assert json.loads(Path(f"{output}.spark_ids").read_text()) == arrow_ids
