"""A writer inserting rows at a steady rate, in a process of its own (the lag benches' load).

    python bench/steady_writer.py HOST PORT SECONDS RATE

Inserts RATE rows a second for SECONDS into ``bench.items`` as root, 100 rows a transaction,
each row's ``t_insert`` the time just before its transaction; prints one JSON line at the end
(the rows written and the seconds it took). In the pipeline's own process the writer shared
its interpreter lock and reached only about 3,000 of 5,000 rows/s.
"""

from __future__ import annotations

import json
import sys
import time

import pymysql

PER_TRANSACTION = 100
FIRST_ID = 10_000_000


def write(host: str, port: int, seconds: float, rate: int) -> dict[str, float]:
    interval = PER_TRANSACTION / rate
    next_id = FIRST_ID
    conn = pymysql.connect(
        host=host, port=port, user="root", password="", database="bench", autocommit=False
    )
    started = time.monotonic()
    deadline = started + seconds
    tick = started
    with conn, conn.cursor() as cur:
        while time.monotonic() < deadline:
            now = time.time()
            cur.executemany(
                "INSERT INTO items VALUES (%s, %s, %s, %s, %s, %s, NOW(6))",
                [(i, "LAG", 1, "1.00", "", now) for i in range(next_id, next_id + PER_TRANSACTION)],
            )
            conn.commit()
            next_id += PER_TRANSACTION
            tick += interval
            time.sleep(max(0.0, tick - time.monotonic()))
    return {"rows": next_id - FIRST_ID, "seconds": time.monotonic() - started}


if __name__ == "__main__":
    host, port, seconds, rate = sys.argv[1:5]
    print(json.dumps(write(host, int(port), float(seconds), int(rate))), flush=True)
