"""Value objects that flow from the binlog source through the store into the sink.

Positions and events are dataclasses with their ordering and serialisation kept here, in
one place, under a format version. Row images travel as JSON text (already converted to the
lossless representation by the source), which keeps the per-event memory small, makes the
memory accounting of the store exact and leaves the sink nothing to convert.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from enum import StrEnum
from sys import getsizeof
from typing import Any

__all__ = [
    "EVENT_FORMAT_VERSION",
    "EVENT_OVERHEAD_BYTES",
    "BinlogPosition",
    "ChangeEvent",
    "EventKind",
    "Op",
    "PreparedXa",
    "ResumePosition",
    "ServerIdentity",
    "Transaction",
]

EVENT_FORMAT_VERSION = 1
"""Version of the serialised forms below (resume positions in Delta commit metadata and rows)."""

COLUMNS_DOC = """\
`columns` is JSON text: a list, in table order, of objects
  {"name": str, "type": str, "unsigned": bool, "precision": int|null, "scale": int|null,
   "length": int|null, "pk": bool, "values": [str]|null}
where `type` is the lowercase MySQL/MariaDB type name: tinyint, smallint, mediumint, int,
bigint, decimal, float, double, bit, date, datetime, timestamp, time, year, char, varchar,
binary, varbinary, text, blob, enum, set, json, geometry, uuid, inet4, inet6. `precision` and
`scale` are set for decimal (and fractional seconds in `scale` for time/datetime/timestamp),
`length` for char/varchar/binary/varbinary (bytes) and bit (bits), `values` for enum and set.
"""

_FILE_INDEX = re.compile(r"^(.*?)(\d+)$")
EVENT_OVERHEAD_BYTES = 224
"""Fixed cost of one ChangeEvent in memory, on top of its own strings (each counted by
``sys.getsizeof``, header included): the object with its garbage-collector header (144 bytes
in CPython 3.11's allocator), its ``index`` and ``size`` (int objects above 256, 32 each) and
the allocator's rounding of two strings (16). The database and table names are counted by
their length only and the column list not at all: they are shared by the table's events."""


class EventKind(StrEnum):
    """What a store item is. COMMIT and DDL end a transaction; ROW never does."""

    ROW = "row"
    DDL = "ddl"
    COMMIT = "commit"


class Op(StrEnum):
    """The `op` column of the change log."""

    INSERT = "c"
    UPDATE = "u"
    DELETE = "d"
    DDL = "ddl"
    SNAPSHOT = "r"


def _file_sort_key(name: str) -> tuple[str, int]:
    match = _FILE_INDEX.match(name)
    if match is None:
        return (name, -1)
    return (match.group(1), int(match.group(2)))


@dataclass(frozen=True, slots=True)
class BinlogPosition:
    """A place in the binlog: file name and byte offset (the END of an event, as servers report)."""

    file: str
    pos: int

    def sort_key(self) -> tuple[str, int, int]:
        """Order by file index numerically, so `.999999` < `.1000000`."""
        prefix, index = _file_sort_key(self.file)
        return (prefix, index, self.pos)

    def __lt__(self, other: BinlogPosition) -> bool:
        return self.sort_key() < other.sort_key()

    def __le__(self, other: BinlogPosition) -> bool:
        return self.sort_key() <= other.sort_key()

    def __gt__(self, other: BinlogPosition) -> bool:
        return self.sort_key() > other.sort_key()

    def __ge__(self, other: BinlogPosition) -> bool:
        return self.sort_key() >= other.sort_key()

    def __str__(self) -> str:
        return f"{self.file}:{self.pos}"


@dataclass(frozen=True, slots=True)
class PreparedXa:
    """A two-phase XA transaction prepared in the binlog but not yet committed or rolled back.

    Its rows are in the group at ``file``/``pos`` (read again after a restart); they are
    captured when the server's ``XA COMMIT`` of ``xid`` arrives.
    """

    xid: str
    """As the server writes it in ``XA END``/``XA COMMIT`` (``X'..',X'..',format``)."""
    file: str
    pos: int
    gtid: str | None = None

    def to_list(self) -> list[Any]:
        """Serialised form inside a resume position."""
        return [self.xid, self.file, self.pos, self.gtid]


@dataclass(frozen=True, slots=True)
class ServerIdentity:
    """The server whose binlog a file/position points into.

    A file name and offset mean something only on the server that wrote them: a promoted
    replica has a ``mysql-bin.000001`` of its own with other transactions in it. GTIDs, in
    contrast, name the same transactions on every server of a replication topology.
    """

    server_id: int
    server_uuid: str | None = None
    """MySQL's ``@@server_uuid`` (unique per server); MariaDB has none."""
    gtid_domain_id: int | None = None
    """MariaDB's ``@@gtid_domain_id``."""

    def same_server(self, other: ServerIdentity) -> bool:
        """True when both describe one server, as far as the recorded fields can tell."""
        if self.server_uuid and other.server_uuid:
            return self.server_uuid == other.server_uuid
        if self.server_id != other.server_id:
            return False
        domains = (self.gtid_domain_id, other.gtid_domain_id)
        return None in domains or domains[0] == domains[1]

    def to_dict(self) -> dict[str, Any]:
        """The JSON form kept in resume positions."""
        return {
            "server_id": self.server_id,
            "server_uuid": self.server_uuid,
            "gtid_domain_id": self.gtid_domain_id,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ServerIdentity:
        """Parse what :meth:`to_dict` wrote."""
        uuid, domain = data.get("server_uuid"), data.get("gtid_domain_id")
        return cls(
            server_id=int(data["server_id"]),
            server_uuid=None if uuid is None else str(uuid),
            gtid_domain_id=None if domain is None else int(domain),
        )

    def __str__(self) -> str:
        if self.server_uuid:
            return f"server_id {self.server_id} (server_uuid {self.server_uuid})"
        if self.gtid_domain_id is not None:
            return f"server_id {self.server_id} (gtid_domain_id {self.gtid_domain_id})"
        return f"server_id {self.server_id}"


@dataclass(frozen=True, slots=True)
class ResumePosition:
    """Where a new binlog reader starts so that its first event is the first one not yet committed.

    ``file``/``pos`` is the start of a transaction. ``gtid_set`` is the server's GTID state
    (MariaDB ``domain-server-seq`` list) of every transaction fully committed before it, used
    when resuming by GTID. ``skip_events`` counts the events of that transaction that are
    already committed: non-zero only after a transaction larger than the store was committed
    in chunks. ``txn_gtid`` names that transaction, so a resume refuses to skip the events of
    another one; ``filters`` fingerprints the table filters the skip was counted with.
    ``xa_prepared`` lists the XA transactions prepared before this point and not yet resolved.
    ``server`` is the server whose binlog ``file``/``pos`` point into (None in
    checkpoints written before it was recorded); it is not part of the position's value.
    """

    file: str
    pos: int
    gtid_set: str | None = None
    skip_events: int = 0
    txn_gtid: str | None = None
    filters: str | None = field(default=None, compare=False)
    """Not part of the position's identity: the same place under any filters."""
    xa_prepared: tuple[PreparedXa, ...] = ()
    server: ServerIdentity | None = field(default=None, compare=False)

    def to_json(self) -> str:
        """Serialise with the format version, for commit metadata and change-log rows."""
        data: dict[str, Any] = {
            "v": EVENT_FORMAT_VERSION,
            "file": self.file,
            "pos": self.pos,
            "gtid_set": self.gtid_set,
            "skip_events": self.skip_events,
        }
        # Optional keys only when set: older positions read the same and stay byte-identical.
        if self.txn_gtid is not None:
            data["txn_gtid"] = self.txn_gtid
        if self.filters is not None:
            data["filters"] = self.filters
        if self.xa_prepared:
            data["xa_prepared"] = [xa.to_list() for xa in self.xa_prepared]
        if self.server is not None:
            data["server"] = self.server.to_dict()  # optional: older readers ignore it
        return json.dumps(data, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> ResumePosition:
        """Parse what :meth:`to_json` wrote; refuses unknown format versions."""
        data: dict[str, Any] = json.loads(text)
        version = data.get("v")
        if version != EVENT_FORMAT_VERSION:
            raise ValueError(f"unsupported resume position format version {version!r}")
        return cls(
            file=str(data["file"]),
            pos=int(data["pos"]),
            gtid_set=data.get("gtid_set"),
            skip_events=int(data.get("skip_events", 0)),
            txn_gtid=data.get("txn_gtid"),
            filters=data.get("filters"),
            xa_prepared=tuple(
                PreparedXa(str(x), str(f), int(p), g) for x, f, p, g in data.get("xa_prepared", [])
            ),
            server=ServerIdentity.from_dict(data["server"]) if data.get("server") else None,
        )

    @property
    def binlog_position(self) -> BinlogPosition:
        """The file/pos part."""
        return BinlogPosition(self.file, self.pos)

    def __str__(self) -> str:
        extra = f" +{self.skip_events} events" if self.skip_events else ""
        gtid = f" gtid={self.gtid_set}" if self.gtid_set else ""
        xa = f" xa_prepared={len(self.xa_prepared)}" if self.xa_prepared else ""
        server = f" on {self.server}" if self.server is not None else ""
        return f"{self.file}:{self.pos}{extra}{gtid}{xa}{server}"


@dataclass(frozen=True, slots=True)
class Transaction:
    """What every event of one binlog transaction shares (one object per transaction)."""

    start: BinlogPosition
    """Reconnect here to replay this transaction from its first event."""
    gtid: str | None
    """This transaction's GTID (``domain-server-seq``), if the server assigned one."""
    gtid_set_before: str | None
    """GTID state of everything committed before this transaction."""
    server_id: int
    timestamp: int
    """Binlog timestamp (seconds since the epoch) of the transaction's first event."""
    filters: str | None = None
    """Fingerprint of the table filters its events were selected with."""
    xa_prepared: tuple[PreparedXa, ...] = ()
    """XA transactions prepared and not resolved before this transaction."""
    xa_resolves: str | None = None
    """The XID this transaction commits (an ``XA COMMIT`` group), if any."""
    idle: bool = False
    """Not a transaction: a server heartbeat while nothing was open. Its COMMIT event says
    that everything up to ``start`` is read and that the server was idle at ``timestamp``
    (the reader's clock), which keeps the lag true and the checkpoint moving on a quiet
    source; it carries no change."""
    server: ServerIdentity | None = None
    """The server whose binlog this transaction was read from, so that a file/position
    checkpoint after it names that server (None: not known, as for the id watch's and a side
    writer's own transactions; the change log then keeps its checkpoint's server)."""
    read_to: BinlogPosition | None = None
    """An idle one's heartbeat coordinates: the server had sent every event of its binlog up
    to there (its end then), so every change before that place is read."""

    @property
    def gtid_set_after(self) -> str | None:
        """GTID state once this transaction is committed: its domain's entry replaced."""
        return merge_gtid(self.gtid_set_before, self.gtid)

    @property
    def xa_prepared_after(self) -> tuple[PreparedXa, ...]:
        """Prepared XA transactions still open once this transaction is committed."""
        if self.xa_resolves is None:
            return self.xa_prepared
        return tuple(xa for xa in self.xa_prepared if xa.xid != self.xa_resolves)


def merge_gtid(gtid_set: str | None, gtid: str | None) -> str | None:
    """The GTID state once ``gtid`` is committed.

    MariaDB (``domain-server-seq``): the entry of ``gtid``'s domain is replaced (one per
    domain). MySQL (``uuid:gno``): ``gno`` is added to the executed set ``uuid:1-5:7,...``; an
    unknown set stays unknown (one transaction's GTID is not the server's executed set).
    """
    if gtid is None:
        return gtid_set
    if ":" in gtid:
        return None if gtid_set is None else _merge_mysql_gtid(gtid_set, gtid)
    domain = gtid.split("-", 1)[0]
    entries = [e for e in (gtid_set or "").split(",") if e and e.split("-", 1)[0] != domain]
    entries.append(gtid)
    return ",".join(sorted(entries, key=lambda e: int(e.split("-", 1)[0])))


_MYSQL_INTERVAL = re.compile(r"^(\d+)(?:-(\d+))?$")


def _merge_mysql_gtid(gtid_set: str, gtid: str) -> str | None:
    """Add one MySQL GTID (untagged ``uuid:gno``) to an executed GTID set, in MySQL's form;
    None (unknown) for a set this does not parse, e.g. with MySQL 8.3 tags."""
    uuid, _, gno_text = gtid.strip().lower().rpartition(":")
    gno = int(gno_text)
    sets: dict[str, list[list[int]]] = {}
    for entry in gtid_set.replace("\n", "").split(","):
        source, *intervals = entry.strip().lower().split(":")
        if not source:
            continue
        ranges = sets.setdefault(source, [])
        for interval in intervals:
            match = _MYSQL_INTERVAL.match(interval)
            if match is None:
                return None
            first = int(match.group(1))
            ranges.append([first, int(match.group(2) or first)])
    ranges = sets.setdefault(uuid, [])
    ranges.append([gno, gno])
    ranges.sort()
    merged: list[list[int]] = []
    for first, last in ranges:
        if merged and first <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], last)
        else:
            merged.append([first, last])
    sets[uuid] = merged
    return ",".join(
        source + "".join(f":{a}" if a == b else f":{a}-{b}" for a, b in sets[source])
        for source in sorted(sets)
    )


@dataclass(slots=True)
class ChangeEvent:
    """One item of the store: a row change, a DDL statement or a transaction's commit.

    Row images (``pk``, ``before``, ``after``) are JSON text of objects mapping column name to
    the lossless value representation chosen by the source.

    Treated as immutable, but not a frozen dataclass: one is built per captured row, and a
    frozen dataclass sets each of its 13 fields through ``object.__setattr__``, which made
    building an event about five times slower (measured: 4.1 vs 0.7 us) and cost several
    percent of a catch-up. Nothing hashes events.
    """

    kind: EventKind
    txn: Transaction
    position: BinlogPosition
    """End of the binlog event this came from (several rows of one rows event share it)."""
    index: int
    """0-based index of this event among its transaction's emitted events."""
    db: str = ""
    table: str = ""
    op: Op | None = None
    pk: str | None = None
    before: str | None = None
    after: str | None = None
    ddl: str | None = None
    columns: str | None = field(default=None, compare=False)
    """JSON list describing the table's columns when the row was written (see
    :data:`COLUMNS_DOC`); one shared string per table version, so it costs no memory per row."""
    size: int = field(default=0, compare=False)
    """Bytes this event holds in memory (what the store's byte limit counts); computed from
    its strings when left 0 (see :data:`EVENT_OVERHEAD_BYTES`)."""

    def __post_init__(self) -> None:
        if self.size == 0:
            strings = (self.pk, self.before, self.after, self.ddl)
            estimate = EVENT_OVERHEAD_BYTES + len(self.db) + len(self.table)
            self.size = estimate + sum(getsizeof(s) for s in strings if s is not None)

    @property
    def ends_transaction(self) -> bool:
        """COMMIT and DDL events are transaction boundaries; a batch may be acked after them."""
        return self.kind is not EventKind.ROW

    def resume_after(self) -> ResumePosition:
        """The position to restart from once this event and all before it are committed."""
        txn = self.txn
        if self.ends_transaction:
            return ResumePosition(
                file=self.position.file,
                pos=self.position.pos,
                gtid_set=txn.gtid_set_after,
                skip_events=0,
                filters=txn.filters,
                xa_prepared=txn.xa_prepared_after,
                server=txn.server,
            )
        return ResumePosition(
            file=txn.start.file,
            pos=txn.start.pos,
            gtid_set=txn.gtid_set_before,
            skip_events=self.index + 1,
            txn_gtid=txn.gtid,
            filters=txn.filters,
            xa_prepared=txn.xa_prepared,
            server=txn.server,
        )

    def sort_key(self) -> tuple[str, int, int, int]:
        """Total order of events in the stream (position, then index within the transaction)."""
        prefix, file_index, pos = self.position.sort_key()
        return (prefix, file_index, pos, self.index)
