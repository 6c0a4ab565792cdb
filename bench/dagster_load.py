"""How long the Dagster definitions take to load: ``build_definitions`` with the source up
(a private MariaDB with N tables), with it refusing connections, with it unreachable (packets
dropped: the connect timeout), and from a stored catalog (what the Component does).

.venv/bin/python bench/dagster_load.py --tables 200 --destinations 3
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from cdc_platform.config import load_config
from cdc_platform.testing.destinations import PASSWORD_ENV, write_conf
from cdc_platform.testing.mariadb import MariaDBServer
from dagster_defs import build_definitions
from dagster_defs.factory import discover_catalogs


def timed(what: str, build: Callable[[], object], assets: Callable[[object], int]) -> None:
    started = time.perf_counter()
    defs = build()
    seconds = time.perf_counter() - started
    print(f"{what:<44} {seconds:7.2f} s  {assets(defs):5d} assets")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tables", type=int, default=200)
    parser.add_argument("--destinations", type=int, default=3)
    args = parser.parse_args()

    def count(defs: object) -> int:
        return len(defs.resolve_asset_graph().get_all_asset_keys())

    with tempfile.TemporaryDirectory(prefix="cdc-load-") as tmp:
        root = Path(tmp)
        with MariaDBServer(root / "mariadb") as server:
            user = server.create_replication_user()
            server.execute("CREATE DATABASE shop")
            server.execute(
                *(
                    f"CREATE TABLE t{i} (id INT PRIMARY KEY, v VARCHAR(20))"
                    for i in range(args.tables)
                ),
                database="shop",
            )
            os.environ[PASSWORD_ENV] = user.password
            conf = root / "conf"
            for n in range(args.destinations):
                write_conf(
                    conf,
                    destination=f"d{n}",
                    server=server,
                    user=user,
                    database="shop",
                    lake_root=root / "lake",
                    server_id=2000 + n,
                )
            timed("source up", lambda: build_definitions(str(conf)), count)
            catalogs = discover_catalogs(load_config(conf))
            timed(
                "stored catalog (the Component's state)",
                lambda: build_definitions(str(conf), catalogs=catalogs),
                count,
            )
            for name, host_port in (
                ("refusing", ("127.0.0.1", 9)),
                ("unreachable", ("10.255.255.1", 3306)),
            ):
                for n in range(args.destinations):
                    path = conf / "destinations" / f"d{n}" / "instance.yaml"
                    text = path.read_text().replace(f"host: {server.host}", f"host: {host_port[0]}")
                    path.write_text(text.replace(f"port: {server.port}", f"port: {host_port[1]}"))
                timed(f"source {name}", lambda: build_definitions(str(conf)), count)
                for n in range(args.destinations):
                    path = conf / "destinations" / f"d{n}" / "instance.yaml"
                    text = path.read_text().replace(f"host: {host_port[0]}", f"host: {server.host}")
                    path.write_text(text.replace(f"port: {host_port[1]}", f"port: {server.port}"))


if __name__ == "__main__":
    main()
