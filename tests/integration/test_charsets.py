"""Every byte of every single-byte charset, and every uca1400 collation, decode as the server does.

For each single-byte charset of the server (``MAXLEN = 1``) one table holds every byte
0x00-0xFF as CHAR(1), VARCHAR(1) and TEXT, all 256 bytes in one TEXT value, and an ENUM whose
labels are the high bytes. The change log must hold what ``CONVERT(col USING utf8mb4)`` returns
on the server, except for the bytes the charset leaves undefined (the server says ``?`` or
U+FFFD for them): those are U+EF00 + byte, the documented lossless form (docs/types.md).
The snapshot reader must give the same JSON text as the binlog for every row.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from cdc_platform.config.source import SourceConfig
from cdc_platform.events import ChangeEvent, EventKind
from cdc_platform.source import BinlogSource
from cdc_platform.source.mysql import connect_source
from cdc_platform.source.reading.row_reader import read_chunk
from cdc_platform.source.reading.table_description import describe_table
from cdc_platform.testing.binlog import collect_events
from cdc_platform.testing.mariadb import MariaDBServer, ReplicationUser
from tests.conftest import MariaDBDatabase

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

_SERVER_IDS = itertools.count(5400)
_ALL_BYTES_ID = 1000
_TWO_BYTE_LABEL = "C3A9"
"""An ENUM label whose bytes are also valid UTF-8 ('é'), which the library decodes as UTF-8."""


def _config(db: MariaDBDatabase) -> SourceConfig:
    return SourceConfig(
        host=db.server.host,
        port=db.server.port,
        user=db.user.name,
        password_env="CDC_TEST_PASSWORD",
        server_id=next(_SERVER_IDS),
        include_tables=[rf"{db.name}\..*"],
        heartbeat_seconds=1.0,
        reconnect_initial_seconds=0.1,
        reconnect_max_seconds=1.0,
    )


def _stream(db: MariaDBDatabase, start: Any, rows: int) -> list[ChangeEvent]:
    source = BinlogSource(_config(db), resume=start, password=db.user.password)
    return collect_events(
        source, lambda evs: sum(e.kind is EventKind.ROW for e in evs) >= rows, timeout=240
    )


def _after_by_table(events: list[ChangeEvent]) -> dict[str, dict[int, str]]:
    out: dict[str, dict[int, str]] = {}
    for event in events:
        if event.kind is EventKind.ROW and event.after is not None:
            out.setdefault(event.table, {})[json.loads(event.after)["id"]] = event.after
    return out


def _snapshot(db: MariaDBDatabase, table: str) -> dict[int, str]:
    """The snapshot reader's image of every row, through the session the runtime uses."""
    with connect_source(_config(db), db.user.password, purpose="test") as conn:
        spec = describe_table(conn, db.name, table)
        chunk = read_chunk(conn, spec, None, 10_000)
    return {int(json.loads(image)["id"]): image for _, image in chunk.rows}


def _lossless(server_text: str, raw: bytes) -> str:
    """The documented form of a one-byte value: the server's text, or U+EF00 + byte for a byte
    the charset does not define (the server's CONVERT gives '?' or U+FFFD for those)."""
    if len(raw) == 1 and ((server_text == "?" and raw != b"?") or server_text == "\ufffd"):
        return chr(0xEF00 + raw[0])
    return server_text


@dataclass
class Charsets:
    db: MariaDBDatabase
    names: list[str]
    binlog: dict[str, dict[int, str]]
    server: dict[str, dict[int, dict[str, Any]]]
    """table -> id -> column -> the server's CONVERT(col USING utf8mb4) and raw bytes."""


@pytest.fixture(scope="module")
def charsets(
    mariadb_server: MariaDBServer, replication_user: ReplicationUser
) -> Iterator[Charsets]:
    if not mariadb_server.running:
        mariadb_server.start()
    names = [
        str(r[0])
        for r in mariadb_server.query(
            "SELECT CHARACTER_SET_NAME FROM information_schema.CHARACTER_SETS "
            "WHERE MAXLEN = 1 AND CHARACTER_SET_NAME <> 'binary' ORDER BY 1"
        )
    ]
    assert len(names) >= 25, names
    with mariadb_server.database("t_charsets_every_byte") as name:
        db = MariaDBDatabase(mariadb_server, name, replication_user)
        start = BinlogSource(_config(db), password=replication_user.password).current_position()
        labels = ", ".join(f"X'{b:02X}'" for b in range(0x80, 0x100))
        server: dict[str, dict[int, dict[str, Any]]] = {}
        with mariadb_server.connect(name) as conn, conn.cursor() as cur:
            cur.execute("SET SESSION sql_mode = ''")
            for cs in names:
                cur.execute(
                    f"CREATE TABLE t_{cs} (id INT PRIMARY KEY, "
                    f"c CHAR(1) CHARACTER SET {cs}, v VARCHAR(1) CHARACTER SET {cs}, "
                    f"x TEXT CHARACTER SET {cs}, "
                    f"e ENUM({labels}, X'{_TWO_BYTE_LABEL}') CHARACTER SET {cs} COLLATE {cs}_bin)"
                )
                values = ", ".join(
                    f"({b}, X'{b:02X}', X'{b:02X}', X'{b:02X}', "
                    f"{'NULL' if b < 0x80 else f'X{chr(39)}{b:02X}{chr(39)}'})"
                    for b in range(256)
                )
                cur.execute(f"INSERT INTO t_{cs} VALUES {values}")
                every = bytes(range(256)).hex()
                cur.execute(
                    f"INSERT INTO t_{cs} VALUES ({_ALL_BYTES_ID}, NULL, NULL, X'{every}', "
                    f"X'{_TWO_BYTE_LABEL}')"
                )
                cur.execute(
                    "SELECT id, "
                    + ", ".join(f"CONVERT({c} USING utf8mb4), CAST({c} AS BINARY)" for c in "cvxe")
                    + f" FROM t_{cs}"
                )
                server[f"t_{cs}"] = {
                    int(r[0]): {c: (r[1 + 2 * i], r[2 + 2 * i]) for i, c in enumerate("cvxe")}
                    for r in cur.fetchall()
                }
        events = _stream(db, start, len(names) * 257)
        yield Charsets(db, names, _after_by_table(events), server)


def _expected(charsets: Charsets, table: str) -> dict[int, dict[str, Any]]:
    rows = charsets.server[table]
    out: dict[int, dict[str, Any]] = {}
    for row_id, cols in rows.items():
        out[row_id] = {}
        for col, (text, raw) in cols.items():
            if text is None:
                out[row_id][col] = None
            elif col == "e":
                out[row_id][col] = text  # labels: the server's text (docs/types.md)
            elif row_id == _ALL_BYTES_ID:
                out[row_id][col] = "".join(
                    _lossless(rows[b]["v"][0], bytes([b])) for b in range(256)
                )
            else:
                out[row_id][col] = _lossless(text, bytes(raw))
    return out


def test_every_single_byte_charset_is_streamed(charsets: Charsets) -> None:
    """No charset stops the stream: every row of every table arrives."""
    assert sorted(charsets.binlog) == sorted(f"t_{cs}" for cs in charsets.names)
    for table, rows in charsets.binlog.items():
        assert len(rows) == 257, table


@pytest.mark.parametrize(
    "cs",
    [
        "armscii8", "ascii", "cp1250", "cp1251", "cp1256", "cp1257", "cp850", "cp852",
        "cp866", "dec8", "geostd8", "greek", "hebrew", "hp8", "keybcs2", "koi8r", "koi8u",
        "latin1", "latin2", "latin5", "latin7", "macce", "macroman", "swe7", "tis620",
    ],
)  # fmt: skip
def test_every_byte_decodes_as_the_server_converts_it(charsets: Charsets, cs: str) -> None:
    """Binlog: each byte as CHAR/VARCHAR/TEXT/ENUM is the server's text or U+EF00 + byte."""
    table = f"t_{cs}"
    assert cs in charsets.names
    expected = _expected(charsets, table)
    got = {row_id: json.loads(image) for row_id, image in charsets.binlog.get(table, {}).items()}
    mismatches = [
        (hex(row_id), col, got.get(row_id, {}).get(col), want)
        for row_id, cols in sorted(expected.items())
        for col, want in cols.items()
        if got.get(row_id, {}).get(col, "<missing>") != want
    ]
    assert not mismatches, mismatches[:12]


@pytest.mark.parametrize("cs", ["cp1250", "cp1257", "greek", "tis620", "swe7", "latin1"])
def test_snapshot_gives_the_binlog_text(charsets: Charsets, cs: str) -> None:
    """The snapshot reader gives exactly the binlog's JSON text for every row."""
    table = f"t_{cs}"
    snap = _snapshot(charsets.db, table)
    binlog = charsets.binlog.get(table, {})
    differing = [(i, snap.get(i), binlog.get(i)) for i in sorted(snap) if snap[i] != binlog.get(i)]
    assert len(snap) == 257
    assert not differing, differing[:5]


def test_snapshot_gives_the_binlog_text_for_every_charset(charsets: Charsets) -> None:
    """The same for all the others, in one go."""
    for cs in charsets.names:
        table = f"t_{cs}"
        snap = _snapshot(charsets.db, table)
        binlog = charsets.binlog.get(table, {})
        assert snap == binlog, cs


UCA1400 = {
    "m3": ("utf8mb3", "utf8mb3_uca1400_ai_ci", "Aé€あ"),
    "m4": ("utf8mb4", "utf8mb4_uca1400_as_cs", "Aé€あ😀"),
    "u2": ("ucs2", "ucs2_uca1400_ai_ci", "Aé€あ"),
    "u16": ("utf16", "utf16_uca1400_swedish_ai_ci", "Aé€あ😀"),
    "u32": ("utf32", "utf32_uca1400_nopad_as_cs", "Aé€あ😀"),
}


def test_uca1400_collations_decode_with_their_charset(mariadb: MariaDBDatabase) -> None:
    """MariaDB's uca1400 collations (ids 2048 and up) on ucs2/utf16/utf32/utf8: right text."""
    columns = ", ".join(
        f"{col} VARCHAR(20) CHARACTER SET {cs} COLLATE {coll}, "
        f"{col}_c CHAR(8) CHARACTER SET {cs} COLLATE {coll}, "
        f"{col}_e ENUM('x', '{text[:4]}') CHARACTER SET {cs} COLLATE {coll}"
        for col, (cs, coll, text) in UCA1400.items()
    )
    # ENUM labels without 😀: information_schema, where labels the library cannot hand over
    # come from, has no characters beyond the BMP (docs/types.md, limitations).
    values = ", ".join(f"'{text}', 'é ', '{text[:4]}'" for _, _, text in UCA1400.values())
    start = BinlogSource(_config(mariadb), password=mariadb.user.password).current_position()
    server = mariadb.server
    server.execute(f"CREATE TABLE t (id INT PRIMARY KEY, {columns})", database=mariadb.name)
    server.execute(f"INSERT INTO t VALUES (1, {values})", database=mariadb.name)
    events = _stream(mariadb, start, 1)
    after = json.loads(_after_by_table(events)["t"][1])
    for col, (_, _, text) in UCA1400.items():
        assert after[col] == text, col
        assert after[f"{col}_c"] == "é", col
        assert after[f"{col}_e"] == text[:4], col
    snap = _snapshot(mariadb, "t")
    assert snap[1] == _after_by_table(events)["t"][1]


def test_every_collation_id_of_the_server_resolves_to_its_charset(
    mariadb: MariaDBDatabase,
) -> None:
    """The collation-id table is complete for this server (uca1400 ids included)."""
    from cdc_platform.source.values.charsets import charset_of_collation  # noqa: PLC0415 (this test's subject, imported where it is used)

    rows = mariadb.server.query(
        "SELECT ID, CHARACTER_SET_NAME "
        "FROM information_schema.COLLATION_CHARACTER_SET_APPLICABILITY"
    )
    assert len(rows) > 1000
    wrong = [
        (i, cs, charset_of_collation(int(i), mariadb=True))
        for i, cs in rows
        if charset_of_collation(int(i), mariadb=True) != cs
    ]
    assert not wrong, wrong[:10]
