"""Which tables a destination mirrors, with their columns: the catalog the Dagster face names
one asset after each entry of.

Two places know: the source (``information_schema``, filtered by the destination's
``include_tables`` / ``exclude_tables``: every captured table, including those without a change
yet) and the change log (every table that ever had a row change or DDL, with the ``columns``
JSON of its newest row). :func:`discover_tables` joins both and never fails for a source that is
down or a change log not yet written: it returns what it could read and says what it could not,
so definitions built from it load offline. A catalog is JSON (:meth:`Catalog.to_json`), for
callers that cache it between loads.

It reads the source and the change log, never Spark: it lives with the other read views of a
configured deployment (:mod:`.status`), beneath every face that loads it (Dagster, Airflow).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable, QueryBuilder

from cdc_platform.config import ConfigSet, SourceConfig
from cdc_platform.errors import CdcError, SinkError
from cdc_platform.sink.destination_lake import DestinationLake
from cdc_platform.source.filters import TableFilter
from cdc_platform.source.mysql import SourceServer
from cdc_platform.source.mysql_errors import MYSQL_ERRORS
from cdc_platform.source.table_names import choose_split, table_name_splits

__all__ = [
    "CATALOG_FORMAT_VERSION",
    "Catalog",
    "CatalogColumn",
    "CatalogTable",
    "catalog_table_name",
    "change_log_tables",
    "discover_tables",
    "read_source",
    "source_tables",
    "without_transient",
]

log = logging.getLogger(__name__)

CATALOG_FORMAT_VERSION = 1
"""Version of :meth:`Catalog.to_json`."""

DISCOVERY_CONNECT_TIMEOUT_SECONDS = 3.0
"""How long discovery waits for the source: definitions must load even when it is down."""

DISCOVERY_READ_TIMEOUT_SECONDS = 5.0
"""How long discovery waits for each answer, the server's greeting included (a host that
accepts the connection but never answers otherwise holds the load for the full read timeout)."""


@dataclass(frozen=True, slots=True)
class CatalogColumn:
    """One column: its name, its source type (``COLUMN_TYPE``, e.g. ``decimal(10,2)``) and
    whether it may be NULL."""

    name: str
    type: str
    nullable: bool = True
    primary_key: bool = False
    comment: str = ""
    """The source's column comment (``COLUMN_COMMENT``), shown as the column's description."""


@dataclass(frozen=True, slots=True)
class CatalogTable:
    """One mirrored table: ``db.table``, its columns (empty when unknown), and where it was
    found (``source``, ``change_log``)."""

    db: str
    table: str
    columns: tuple[CatalogColumn, ...] = ()
    found_in: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        """``db.table``."""
        return f"{self.db}.{self.table}"


@dataclass(frozen=True, slots=True)
class Catalog:
    """The tables of one destination, sorted by (db, table), and what could not be read."""

    destination: str
    tables: tuple[CatalogTable, ...] = ()
    problems: tuple[str, ...] = field(default=(), compare=False)
    source_kind: str = ""
    """``mysql`` or ``mariadb`` when the source was read ("" when it was not)."""

    def to_json(self) -> str:
        """The catalog as JSON text (format :data:`CATALOG_FORMAT_VERSION`)."""
        return json.dumps(
            {
                "version": CATALOG_FORMAT_VERSION,
                "destination": self.destination,
                "tables": [
                    {
                        "db": t.db,
                        "table": t.table,
                        "found_in": list(t.found_in),
                        "columns": [
                            [c.name, c.type, c.nullable, c.primary_key, c.comment]
                            for c in t.columns
                        ],
                    }
                    for t in self.tables
                ],
                "problems": list(self.problems),
                "source_kind": self.source_kind,
            },
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, text: str) -> Catalog:
        """Read :meth:`to_json`'s text; ValueError for another format."""
        doc = json.loads(text)
        if not isinstance(doc, dict) or doc.get("version") != CATALOG_FORMAT_VERSION:
            raise ValueError(f"not a table catalog of format {CATALOG_FORMAT_VERSION}")
        return cls(
            destination=str(doc["destination"]),
            tables=tuple(
                CatalogTable(
                    db=str(t["db"]),
                    table=str(t["table"]),
                    columns=tuple(
                        CatalogColumn(str(c[0]), str(c[1]), bool(c[2]), bool(c[3]), *c[4:5])
                        for c in t["columns"]
                    ),
                    found_in=tuple(str(f) for f in t["found_in"]),
                )
                for t in doc["tables"]
            ),
            problems=tuple(str(p) for p in doc.get("problems", [])),
            source_kind=str(doc.get("source_kind", "")),
        )


def source_tables(
    source: SourceConfig, *, connect_timeout: float = DISCOVERY_CONNECT_TIMEOUT_SECONDS
) -> list[CatalogTable]:
    """Every base table the destination's filters capture, with its columns, in one query.

    Raises:
        SourceError: the server cannot be reached, refused the login or the query.
    """
    return read_source(source, connect_timeout=connect_timeout)[1]


def read_source(
    source: SourceConfig, *, connect_timeout: float = DISCOVERY_CONNECT_TIMEOUT_SECONDS
) -> tuple[str, list[CatalogTable]]:
    """The server's kind (``mariadb`` or ``mysql``, from its greeting) and
    :func:`source_tables`."""
    server = SourceServer(source, purpose="table discovery")
    conn = server.connect(
        read_timeout=DISCOVERY_READ_TIMEOUT_SECONDS, connect_timeout=connect_timeout
    )
    greeting = str(getattr(conn, "server_version", ""))  # the version in the server's greeting
    kind = "mariadb" if "mariadb" in greeting.lower() else "mysql"
    filt = TableFilter(source.include_tables, source.exclude_tables)
    try:
        with conn.cursor() as cur:
            cur.execute(
                "SELECT c.TABLE_SCHEMA, c.TABLE_NAME, c.COLUMN_NAME, c.COLUMN_TYPE, "
                "c.IS_NULLABLE, c.COLUMN_KEY, c.COLUMN_COMMENT FROM information_schema.COLUMNS c "
                "JOIN information_schema.TABLES t ON t.TABLE_SCHEMA = c.TABLE_SCHEMA "
                "AND t.TABLE_NAME = c.TABLE_NAME WHERE t.TABLE_TYPE = 'BASE TABLE' "
                "AND c.TABLE_SCHEMA NOT IN "
                "('mysql', 'information_schema', 'performance_schema', 'sys') "
                "ORDER BY c.TABLE_SCHEMA, c.TABLE_NAME, c.ORDINAL_POSITION"
            )
            rows = list(cur.fetchall())
    except MYSQL_ERRORS as exc:
        raise server.error(exc, "listing the tables of") from None
    finally:
        conn.close()
    columns: dict[tuple[str, str], list[CatalogColumn]] = {}
    for db, table, name, type_, nullable, key, comment in rows:
        if filt.matches(str(db), str(table)):
            columns.setdefault((str(db), str(table)), []).append(
                CatalogColumn(
                    str(name), str(type_), str(nullable) == "YES", str(key) == "PRI", str(comment)
                )
            )
    return kind, [
        CatalogTable(db, table, tuple(cols), ("source",))
        for (db, table), cols in sorted(columns.items())
    ]


def _log_columns(text: Any) -> tuple[CatalogColumn, ...]:
    try:
        described = json.loads(str(text)) if text is not None else []
    except ValueError:
        return ()
    out = []
    for c in described if isinstance(described, list) else []:
        if not isinstance(c, dict) or "name" not in c:
            continue
        type_ = str(c.get("type") or "")
        if c.get("unsigned"):
            type_ += " unsigned"
        out.append(CatalogColumn(str(c["name"]), type_, not c.get("pk"), bool(c.get("pk"))))
    return tuple(out)


def change_log_tables(lake: DestinationLake) -> list[CatalogTable]:
    """Every table with a row change or DDL in the destination's change log (none when there is
    no table yet), with the columns of its newest row that carries them.

    Raises:
        SinkError: the table exists but could not be read (storage trouble may pass).
    """
    uri = lake.change_log
    try:
        delta = DeltaTable(uri, storage_options=lake.storage_options)
    except Exception as exc:  # no table there yet (delta-rs raises TableNotFoundError)
        log.debug("no change log at %s: %s", uri, exc)
        return []
    try:
        query = QueryBuilder().register("changes", delta)
        newest = pa.table(
            query.execute(
                'SELECT db, "table", MAX(seq) AS seq FROM changes WHERE db IS NOT NULL '
                'AND "table" IS NOT NULL AND columns IS NOT NULL GROUP BY db, "table"'
            )
        )
        named = pa.table(
            query.execute(
                'SELECT DISTINCT db, "table" FROM changes '
                'WHERE db IS NOT NULL AND "table" IS NOT NULL'
            )
        )
        seqs = [int(s) for s in newest.column("seq").to_pylist()]
        described: dict[tuple[str, str], tuple[CatalogColumn, ...]] = {}
        if seqs:
            found = pa.table(
                query.execute(
                    'SELECT db, "table", columns FROM changes '  # noqa: S608 - ints only
                    f"WHERE seq IN ({', '.join(str(s) for s in seqs)})"
                )
            )
            for row in found.to_pylist():
                described[(str(row["db"]), str(row["table"]))] = _log_columns(row["columns"])
    except Exception as exc:  # delta-rs / DataFusion errors, translated here
        raise SinkError(f"reading the tables of the change log at {uri} failed: {exc}") from exc
    pairs = {(str(r["db"]), str(r["table"])) for r in named.to_pylist()}
    return [
        CatalogTable(db, table, described.get((db, table), ()), ("change_log",))
        for db, table in sorted(pairs)
    ]


def _merge(destination: str, found: Iterable[CatalogTable], problems: list[str]) -> Catalog:
    tables: dict[tuple[str, str], CatalogTable] = {}
    for entry in found:
        key = (entry.db, entry.table)
        known = tables.get(key)
        if known is None:
            tables[key] = entry
            continue
        # The source's columns (full types) win over the change log's newest row.
        tables[key] = CatalogTable(
            entry.db,
            entry.table,
            known.columns or entry.columns,
            tuple(dict.fromkeys([*known.found_in, *entry.found_in])),
        )
    return Catalog(destination, tuple(tables[k] for k in sorted(tables)), tuple(problems))


def without_transient(catalog: Catalog, source: SourceConfig) -> Catalog:
    """``catalog`` without the transient tables of online schema-change tools (``_t_new``,
    ``_t_old``, ``_t_gho``, ``_t_ghc``, ``_t_del`` beside a captured ``t``): the stream follows
    them into ``t`` (docs/ddl.md); a catalog read while a tool ran may still name them."""
    filt = TableFilter(source.include_tables, source.exclude_tables)
    kept = tuple(t for t in catalog.tables if not filt.transient(t.db, t.table))
    return replace(catalog, tables=kept)


def discover_tables(
    configset: ConfigSet,
    destination: str,
    *,
    connect_timeout: float = DISCOVERY_CONNECT_TIMEOUT_SECONDS,
    use_source: bool = True,
) -> Catalog:
    """The tables of a configured destination: the source's captured tables (unless
    ``use_source`` is false) joined with the change log's. What could not be read is in
    :attr:`Catalog.problems` (never a secret); nothing raises for a source that is down."""
    problems: list[str] = []
    found: list[CatalogTable] = []
    kind = ""
    valid = configset.destinations.get(destination)
    if valid is None:
        problems.append(f"{destination}: not a valid destination")
        return Catalog(destination, (), tuple(problems))
    source = valid.config.source
    if use_source and source.mode == "binlog":
        try:
            kind, tables = read_source(source, connect_timeout=connect_timeout)
            found.extend(tables)
        except CdcError as exc:
            problems.append(f"source: {exc}")
    try:
        found.extend(change_log_tables(DestinationLake.of(configset, destination)))
    except CdcError as exc:
        problems.append(f"change log: {exc}")
    return without_transient(
        replace(_merge(destination, found, problems), source_kind=kind), source
    )


def catalog_table_name(configset: ConfigSet, destination: str, name: str) -> tuple[str, str]:
    """``(db, table)`` of ``name`` by the one resolution (:func:`choose_split`) over the
    destination's catalog (its source and change-log tables: a mirror outlives its source
    table, and the source may be down), read only when ``name`` has several meanings.

    Raises:
        SnapshotError: ``name`` is not ``db.table``.
    """
    if len(table_name_splits(name)) <= 1:
        return choose_split(name, ())
    catalog = discover_tables(configset, destination)
    return choose_split(name, {(t.db, t.table) for t in catalog.tables})
