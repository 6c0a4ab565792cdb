"""CPU time per row of the rows path alone: decode rows events, build change events, build the
commit's Arrow table. No server, no threads: comparable between two checkouts even on a busy
machine (the best of several repetitions of CPU time, not wall time).

    .venv/bin/python bench/rows_path.py [--rows 11000] [--distinct-times] [--repeat 12]

The table is bench/throughput.py's 7-column ``items`` (BIGINT key, two VARCHARs, INT,
DECIMAL(10,2), DOUBLE, DATETIME(6)), 100 rows per rows event as a bulk INSERT writes them; by
default the rows of one event share their DATETIME (``NOW()`` of one statement), with
``--distinct-times`` every row has its own. To compare two checkouts, run it from each (with
``PYTHONPATH`` set to the checkout) one after the other, twice.
"""

from __future__ import annotations

import argparse
import datetime
import struct
import time

from cdc_platform.events import BinlogPosition, ChangeEvent, ResumePosition, Transaction
from cdc_platform.sink.schema import events_to_table
from cdc_platform.source.stream.row_changes import row_changes
from cdc_platform.source.stream.rows_framing import WRITE, RowsFrame
from cdc_platform.source.values import ColumnSpec, FieldType, RowDecoder
from cdc_platform.testing.binlog_values import encode_datetime2, encode_decimal

COLUMNS = [
    ColumnSpec("id", FieldType.LONGLONG),
    ColumnSpec("sku", FieldType.VARCHAR, encoding="utf8mb4", max_length=128),
    ColumnSpec("qty", FieldType.LONG),
    ColumnSpec("price", FieldType.NEWDECIMAL, precision=10, scale=2),
    ColumnSpec("note", FieldType.VARCHAR, encoding="utf8mb4", max_length=800),
    ColumnSpec("t_insert", FieldType.DOUBLE),
    ColumnSpec("updated", FieldType.DATETIME2, fsp=6),
]
PER_EVENT = 100


def row_bytes(i: int, distinct_times: bool) -> bytes:
    sku = f"SKU-{i:08d}".encode()
    note = ("n" * (i % 50)).encode()
    micros = i % 1_000_000 if distinct_times else 123456
    return b"".join(
        [
            b"\x00",  # no NULLs
            struct.pack("<q", i),
            bytes([len(sku)]) + sku,
            struct.pack("<i", i % 97),
            encode_decimal(f"{i % 10000}.25", 10, 2),
            struct.pack("<H", len(note)) + note,
            struct.pack("<d", 1732545601.123456 + i),
            encode_datetime2((2026, 11, 25), (15, 0, 1), micros, 6),
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=11_000)
    parser.add_argument("--distinct-times", action="store_true")
    parser.add_argument("--repeat", type=int, default=12)
    args = parser.parse_args()
    decoder = RowDecoder("bench", "items", COLUMNS, [0])
    frames = []
    for k, first in enumerate(range(0, args.rows, PER_EVENT)):
        data = b"".join(
            row_bytes(i, args.distinct_times)
            for i in range(first, min(first + PER_EVENT, args.rows))
        )
        frames.append(RowsFrame(WRITE, 1, b"\x7f", b"", data, 0, 1, len(data), 1000 + k))
    committed_at = datetime.datetime.now(datetime.UTC)
    best = (float("inf"), 0.0, 0.0)
    rows = 0
    for _ in range(args.repeat):
        began = time.process_time()
        txn = Transaction(BinlogPosition("bin.000001", 4), "0-1-1", None, 1, 1_700_000_000)
        events: list[ChangeEvent] = []
        index = 0
        for frame in frames:
            decoded = decoder.images(frame.rows, frame.present)
            position = BinlogPosition("bin.000001", frame.log_pos)
            out, index = row_changes(
                frame, decoder, decoded, txn=txn, position=position, index=index, skip=0
            )
            events.extend(out)
        decoded_at = time.process_time()
        events_to_table(
            events,
            first_seq=1,
            batch_seq=1,
            epoch=1,
            resume=ResumePosition("bin.000001", 4),
            committed_at=committed_at,
        )
        done = time.process_time()
        rows = len(events)
        if done - began < best[0]:
            best = (done - began, decoded_at - began, done - decoded_at)
    total, decode, arrow = (seconds / rows * 1e6 for seconds in best)
    times = "distinct" if args.distinct_times else "shared per event"
    print(
        f"{rows} rows ({times} DATETIME): {total:.2f} us of CPU a row "
        f"(decode and change events {decode:.2f}, Arrow table {arrow:.2f}); "
        f"{1e6 / total:,.0f} rows per CPU second"
    )


if __name__ == "__main__":
    main()
