"""The state watch store in SQL tables (SQLite, MariaDB/MySQL, PostgreSQL).

Three tables: ``cdc_state`` (current values), ``cdc_state_events`` (the bounded history,
numbered) and ``cdc_state_meta`` (the newest index and the highest index dropped). Every write
first locks the meta row, so writers are serialised and the event numbers are committed in
order: a poller that reads "everything after 41" can never see 43 before 42 commits. (SOFA
Registry's watch-by-id needs a 1 s "stable id" delay because its ids are not committed in
order; this does not.)
"""

from __future__ import annotations

from pathlib import Path

from pydantic import SecretStr

from cdc_platform.errors import TooFarBehindError, WatchError
from cdc_platform.infra.sqldb import Database, Tx
from cdc_platform.watch.store import (
    DEFAULT_HISTORY,
    Entry,
    EventKind,
    Listing,
    StateStore,
    WatchEvent,
)

__all__ = ["SqlStateStore"]


class SqlStateStore(StateStore):
    """A :class:`StateStore` in a SQL database; many processes may read and write it."""

    def __init__(
        self,
        db: Database | str,
        *,
        history: int = DEFAULT_HISTORY,
        prefix: str = "cdc_state",
        password: SecretStr | None = None,
        base_dir: Path | None = None,
    ) -> None:
        if history < 1:
            raise ValueError("history must be >= 1")
        if not prefix.replace("_", "").isalnum():
            raise ValueError(f"table prefix {prefix!r} must be letters, digits and '_'")
        self.db = (
            db
            if isinstance(db, Database)
            else Database(db, password=password, base_dir=base_dir, error=WatchError)
        )
        self.history = history
        self._values = prefix
        self._events = f"{prefix}_events"
        self._meta = f"{prefix}_meta"

    def _schema(self) -> None:
        d = self.db.dialect
        self.db.ensure_schema(
            f"state:{self._values}",
            [
                f"""CREATE TABLE IF NOT EXISTS {self._values} (
                    state_key VARCHAR(255) NOT NULL PRIMARY KEY,
                    value {d.text} NOT NULL,
                    idx {d.bigint} NOT NULL,
                    fence {d.bigint},
                    updated_at {d.double} NOT NULL
                )""",
                f"""CREATE TABLE IF NOT EXISTS {self._events} (
                    idx {d.bigint} NOT NULL PRIMARY KEY,
                    state_key VARCHAR(255) NOT NULL,
                    kind VARCHAR(8) NOT NULL,
                    value {d.text},
                    created_at {d.double} NOT NULL
                )""",
                f"""CREATE TABLE IF NOT EXISTS {self._meta} (
                    name VARCHAR(16) NOT NULL PRIMARY KEY,
                    value {d.bigint} NOT NULL
                )""",
                d.insert_if_absent(self._meta, ("name", "value")).replace("?, ?", "'index', 0"),
                d.insert_if_absent(self._meta, ("name", "value")).replace("?, ?", "'floor', 0"),
            ],
        )

    def _meta_value(self, tx: Tx, name: str, *, lock: bool = False) -> int:
        suffix = self.db.dialect.for_update if lock else ""
        row = tx.one(f"SELECT value FROM {self._meta} WHERE name = ?{suffix}", (name,))
        return int(row[0]) if row is not None else 0

    def _write(self, key: str, kind: EventKind, value: str | None, fence: int | None) -> int | None:
        self._schema()
        with self.db.transaction() as tx:
            index = self._meta_value(tx, "index", lock=True)  # serialises writers
            current = tx.one(f"SELECT fence FROM {self._values} WHERE state_key = ?", (key,))
            if kind is EventKind.DELETE and current is None:
                return None
            stored = None if current is None or current[0] is None else int(current[0])
            if fence is not None and stored is not None and fence < stored:
                return None
            now = tx.now()
            new = index + 1
            tx.execute(
                f"INSERT INTO {self._events} (idx, state_key, kind, value, created_at) "
                "VALUES (?, ?, ?, ?, ?)",
                (new, key, kind.value, value, now),
            )
            if kind is EventKind.DELETE:
                tx.execute(f"DELETE FROM {self._values} WHERE state_key = ?", (key,))
            else:
                kept = fence if fence is not None else stored
                updated = tx.execute(
                    f"UPDATE {self._values} SET value = ?, idx = ?, fence = ?, updated_at = ? "
                    "WHERE state_key = ?",
                    (value, new, kept, now, key),
                )
                if updated == 0:
                    tx.execute(
                        f"INSERT INTO {self._values} (state_key, value, idx, fence, updated_at) "
                        "VALUES (?, ?, ?, ?, ?)",
                        (key, value, new, kept, now),
                    )
            tx.execute(f"UPDATE {self._meta} SET value = ? WHERE name = 'index'", (new,))
            floor = new - self.history
            if floor > 0:
                tx.execute(f"DELETE FROM {self._events} WHERE idx <= ?", (floor,))
                tx.execute(
                    f"UPDATE {self._meta} SET value = ? WHERE name = 'floor' AND value < ?",
                    (floor, floor),
                )
            return new

    def put(self, key: str, value: str, *, fence: int | None = None) -> int | None:
        """Set ``key`` unless the fence refuses it."""
        return self._write(key, EventKind.PUT, value, fence)

    def delete(self, key: str, *, fence: int | None = None) -> int | None:
        """Remove ``key`` unless absent or refused."""
        return self._write(key, EventKind.DELETE, None, fence)

    def get(self, key: str) -> Entry | None:
        """The current entry."""
        self._schema()
        with self.db.transaction() as tx:
            row = tx.one(
                f"SELECT state_key, value, idx, fence, updated_at FROM {self._values} "
                "WHERE state_key = ?",
                (key,),
            )
        if row is None:
            return None
        return Entry(str(row[0]), str(row[1]), int(row[2]), _opt_int(row[3]), float(row[4]))

    def listing(self, prefix: str = "") -> Listing:
        """Entries under ``prefix`` and the index they are current at (one transaction)."""
        self._schema()
        with self.db.transaction() as tx:
            index = self._meta_value(tx, "index")
            rows = tx.all(
                f"SELECT state_key, value, idx, fence, updated_at FROM {self._values} "
                "WHERE state_key LIKE ? ORDER BY state_key",
                (_like_prefix(prefix),),
            )
        entries = [
            Entry(str(r[0]), str(r[1]), int(r[2]), _opt_int(r[3]), float(r[4]))
            for r in rows
            if str(r[0]).startswith(prefix)
        ]
        return Listing(entries, index)

    def events(self, prefix: str, since: int, limit: int = 1000) -> list[WatchEvent]:
        """Kept events after ``since``; TooFarBehindError when some were dropped."""
        self._schema()
        with self.db.transaction() as tx:
            index = self._meta_value(tx, "index")
            floor = self._meta_value(tx, "floor")
            if since < floor or since > index:
                oldest = tx.one(f"SELECT MIN(idx) FROM {self._events}")
                first = int(oldest[0]) if oldest is not None and oldest[0] is not None else 0
                raise TooFarBehindError(since, first, index)
            rows = tx.all(
                f"SELECT idx, state_key, kind, value, created_at FROM {self._events} "
                f"WHERE idx > ? AND state_key LIKE ? ORDER BY idx LIMIT {int(limit)}",
                (since, _like_prefix(prefix)),
            )
        return [
            WatchEvent(int(r[0]), str(r[1]), EventKind(str(r[2])), r[3], float(r[4]))
            for r in rows
            if str(r[1]).startswith(prefix)
        ]

    def index(self) -> int:
        """The newest index."""
        self._schema()
        with self.db.transaction() as tx:
            return self._meta_value(tx, "index")

    def close(self) -> None:
        """Close the connection."""
        self.db.close()


def _opt_int(value: object) -> int | None:
    return None if value is None else int(str(value))


def _like_prefix(prefix: str) -> str:
    """A LIKE pattern for keys starting with ``prefix`` (wildcards widened, then re-checked)."""
    return prefix.replace("%", "_") + "%"
