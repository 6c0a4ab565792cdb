"""Time from an instance.yaml change to the first commit of the new config under `serve`.

.venv/bin/python bench/serve_reload.py --trials 10

A private MariaDB and one `cdc-platform serve` process (its periodic scan set to 600 s, so
only file-system events can act). Each trial creates a new table, keeps inserting into it
every 10 ms, then rewrites the destination's instance.yaml (temp file + rename, as editors
do) to include it, and measures until the change log holds its first row: the reload (stop
after the in-flight commit, lease released and taken again, a new binlog connection) plus one
batch. Goal: under 2 s.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from deltalake import DeltaTable

from cdc_platform.testing.destinations import PASSWORD_ENV
from cdc_platform.testing.mariadb import MariaDBServer
from cdc_platform.testing.processes import tail_of


def instance(server: MariaDBServer, user: str, tables: list[str]) -> str:
    pattern = "|".join(tables)
    return (
        f"source:\n  host: {server.host}\n  port: {server.port}\n  user: {user}\n"
        f"  password_env: {PASSWORD_ENV}\n  server_id: 4001\n"
        f"  include_tables: ['shop\\.({pattern})']\n"
        "start: {mode: latest}\n"
        "store:\n  batch_timeout_seconds: 0.2\n"
    )


def rows_of(uri: str, table: str) -> int:
    try:
        data = DeltaTable(uri).to_pyarrow_table(columns=["table"]).column("table").to_pylist()
    except Exception:  # the change log does not exist yet
        return 0
    return sum(1 for name in data if name == table)


def write(path: Path, text: str) -> None:
    temp = path.with_name(".instance.yaml.tmp")
    temp.write_text(text)
    temp.replace(path)


def insert_loop(server: MariaDBServer, table: str, stop: threading.Event) -> None:
    conn = server.connect(database="shop")
    try:
        key = 0
        while not stop.wait(0.01):
            key += 1
            with conn.cursor() as cur:
                cur.execute(f"INSERT INTO {table} VALUES ({key})")
            conn.commit()
    finally:
        conn.close()


def run(trials: int, root: Path) -> None:
    with MariaDBServer(root / "mariadb") as server:
        user = server.create_replication_user()
        server.execute("CREATE DATABASE shop", "CREATE TABLE shop.t0 (id INT PRIMARY KEY)")
        conf = root / "conf"
        (conf / "destinations" / "bench").mkdir(parents=True)
        (conf / "platform.yaml").write_text(
            f"lake_root: {root / 'lake'}\nserve:\n  scan_interval_seconds: 600\n"
        )
        path = conf / "destinations" / "bench" / "instance.yaml"
        tables = ["t0"]
        write(path, instance(server, user.name, tables))
        uri = str(root / "lake" / "bench" / "changes")
        log = root / "serve.log"
        env = {**os.environ, PASSWORD_ENV: user.password}
        with log.open("ab") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "cdc_platform.cli", "serve", "--conf", str(conf)],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        times: list[float] = []
        try:
            for trial in range(1, trials + 1):
                table = f"t{trial}"
                server.execute(f"CREATE TABLE shop.{table} (id INT PRIMARY KEY)")
                stop = threading.Event()
                writer = threading.Thread(target=insert_loop, args=(server, table, stop))
                writer.start()
                try:
                    time.sleep(0.5)  # the serve process is settled, rows are flowing
                    tables.append(table)
                    began = time.monotonic()
                    write(path, instance(server, user.name, tables))
                    while rows_of(uri, table) == 0:
                        if proc.poll() is not None or time.monotonic() - began > 60:
                            raise RuntimeError(f"no reload after 60 s\n{tail_of(log)}")
                        time.sleep(0.02)
                    times.append(time.monotonic() - began)
                finally:
                    stop.set()
                    writer.join()
                print(f"trial {trial}: {times[-1]:.2f} s from the file change to the new table")
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
    print(
        f"reload to first commit of the new config over {len(times)} trials: "
        f"median {statistics.median(times):.2f} s, max {max(times):.2f} s (goal < 2 s)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="serve-reload-") as root:
        run(args.trials, Path(root))


if __name__ == "__main__":
    main()
