"""Current-state mirrors of source tables, maintained from the change log by primary key.

``apply_changes`` brings ``<mirror_root>/<db>.<table>`` (names encoded by
:func:`.names.location_name`) up to the change log's newest row of that table. Tables without
a primary key keep a count per identical row (:mod:`.multiset`). The mirror holds the source
table's columns, typed (:mod:`.types`), and nothing else, so it compares column for column
with the source.

How far a mirror got is remembered in a small Delta table beside it (:mod:`.mirror_state`,
written *after* the mirror's commit); where the tables live is :mod:`.locations`. An apply is
either

* a **merge**: the changes with ``last seq < seq <= newest`` reduced to the newest change per
  key (:mod:`.plan`) and written to a staging table (``<mirror_root>/_cdc_staging/...``,
  removed afterwards), then one ``MERGE INTO`` (delete / update / insert) from it, when the
  schema is unchanged; or
* a **rebuild**: the whole table recomputed from the change log (from its last TRUNCATE /
  DROP TABLE) and written with ``overwriteSchema``, when the mirror is new, the schema changed
  (DDL added, dropped, renamed or retyped a column, or changed the key), or the table was
  truncated. Correctness first: DDL is rare, and a rebuild needs no column-by-column evolution.

Both are idempotent: they set every touched key to its state as of the newest seq, so applying
the same range again, or a range that starts earlier (after a crash between the mirror's
commit and the state's), gives the same table. The state is only an optimisation of where to
start; a lost state means one rebuild. Applies of the *same* mirror must not run
concurrently (their MERGE and state commits could interleave); different tables are
independent. Change-log ``VERSION AS OF`` is not used for this:
the sink keeps only 15 minutes of log history (``MaintenancePolicy.log_retention``), while a
seq bound is valid forever (seqs are strictly increasing and never rewritten).

Only Spark SQL and DataFrame API that Apache Spark with Delta runs as well: ``read.format
("delta")``, ``MERGE INTO delta.`path```, overwrite with ``overwriteSchema``.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T  # noqa: N812 (the PySpark idiom)

from cdc_platform.errors import CdcError, MirrorError, SinkError
from cdc_platform.sink.lake_files import LakeFile, join_uri
from cdc_platform.spark import ddl as ddl_parser
from cdc_platform.spark import multiset
from cdc_platform.spark.apply_counts import staged_counts
from cdc_platform.spark.locations import (
    STAGING_DIR,
    TableFacts,
    delta_ref,
    delta_version,
    mirror_uri,
    require_change_log,
    table_exists,
    table_facts,
)
from cdc_platform.spark.mirror_state import (
    MirrorState,
    schema_signature,
    state_history,
    write_state,
)
from cdc_platform.spark.names import location_name, quote_identifier
from cdc_platform.spark.plan import (
    Timeline,
    apply_plan,
    change_rows,
    key_condition,
    key_events,
    net_changes,
    read_change_log,
    timeline,
)
from cdc_platform.spark.types import TableSchema, ZeroDates, spark_type, with_zero_dates

__all__ = ["Hook", "MirrorResult", "Step", "apply_changes"]

logger = logging.getLogger("cdc_platform.spark.mirror")


STALE_STAGING_SECONDS = 3600
"""Staging tables left by interrupted applies are removed after this long."""

FIRST_COMMIT = "00000000000000000000.json"
"""A staging table's only commit: its time is the table's age."""


DROPPED_MODE = "dropped"
"""The state's ``mode`` of an apply that found the source table gone (dropped or renamed)."""

Step = Literal["computed", "mirror_committed", "state_committed"]
"""Where an apply is: changes computed, mirror committed, state committed."""
Hook = Callable[[Step], None]
"""Called with a step name as an apply passes it; tests raise from it to simulate a crash."""


@dataclass(frozen=True, slots=True)
class MirrorResult:
    """What one apply (or as-of build) did.

    Counts are the net effect per key of the applied changes: a key first seen as an insert
    and still present counts as inserted, an existing key still present as updated, an
    existing key gone as deleted; a key inserted and deleted within the range counts as none.
    A rebuild counts every row it wrote as inserted.
    """

    db: str
    table: str
    mirror_uri: str
    mode: Literal["noop", "merge", "rebuild", "as_of"]
    previous_seq: int
    """seq the mirror reflected before (as_of: seq of the mirror version it started from, or of
    the last TRUNCATE / DROP TABLE; 0 when it replayed the whole history)."""
    last_seq: int
    """Newest change-log seq of the table the mirror reflects."""
    changes: int
    """Change-log rows (c/u/d/r) read for this apply."""
    rows_inserted: int
    rows_updated: int
    rows_deleted: int
    mirror_rows: int
    change_log_version: int | None
    mirror_version: int | None
    seconds: float
    columns: tuple[str, ...] = ()
    last_ts: datetime | None = None
    """Binlog timestamp of the newest change applied in this call (None when none was)."""
    dropped: str | None = None
    """Why the source table no longer exists ("dropped", "renamed to db.t", "database
    dropped"): the mirror is empty and no longer current. None while the table exists."""

    def metadata(self) -> dict[str, int | float | str | None]:
        """Plain values for asset metadata (Dagster charts numeric ones over time).

        ``lag_seconds`` is how old the newest applied change was when the apply finished:
        source commit to mirror, the end-to-end freshness of the mirror.
        """
        lag = None
        if self.last_ts is not None:
            lag = round((datetime.now(UTC) - self.last_ts).total_seconds(), 3)
        return {
            "mode": self.mode,
            "mirror_rows": self.mirror_rows,
            "rows_inserted": self.rows_inserted,
            "rows_updated": self.rows_updated,
            "rows_deleted": self.rows_deleted,
            "changes": self.changes,
            "last_seq": self.last_seq,
            "change_log_version": self.change_log_version,
            "mirror_version": self.mirror_version,
            "dropped": self.dropped,
            "lag_seconds": lag,
            "seconds": round(self.seconds, 3),
        }


def _needs_rebuild(  # noqa: PLR0911 (one reason per return)
    line: Timeline,
    state: MirrorState | None,
    mirror_exists: bool,
    uri: str,
    storage_options: Mapping[str, str] | None,
) -> str | None:
    """Why the increment cannot be merged, or None when it can."""
    if state is None or state.schema is None:
        return "no state"
    if not mirror_exists:
        return "mirror missing"
    keyless = line.target is not None and not line.target.has_primary_key
    # counts are added, not set: a keyless mirror merges only onto the version its state saw
    if keyless and (
        state.mirror_version is None or delta_version(uri, storage_options) != state.mirror_version
    ):
        return "no primary key and the mirror is not at its remembered version"
    if line.reset_seq is not None:
        return "table truncated or dropped"
    if line.renamed:
        return "column renamed"
    wanted = schema_signature(line.target)
    if wanted != schema_signature(state.schema):
        return "schema changed"
    if any(schema_signature(v.schema) != wanted for v in line.versions):
        return "schema changed within the changes"
    return None


class _Apply:
    """One apply_changes call: its inputs, steps and error translation."""

    def __init__(  # noqa: PLR0913 (which table of which change log; the hook keyword-only)
        self,
        spark: SparkSession,
        change_log_uri: str,
        root: str,
        db: str,
        table: str,
        *,
        hook: Hook | None,
        storage_options: Mapping[str, str] | None,
        held: bool = False,
        zero_dates: ZeroDates = "string",
    ) -> None:
        self.held = held
        self.zero_dates = zero_dates
        self.spark = spark
        self.options = storage_options
        self.change_log_uri = change_log_uri
        self.root = root
        self.db = db
        self.table = table
        self.uri = mirror_uri(root, db, table)
        self.hook = hook or (lambda _step: None)
        self.started = time.perf_counter()

    def run(self) -> MirrorResult:
        require_change_log(self.spark, self.change_log_uri, self.options)
        changes = read_change_log(self.spark, self.change_log_uri)
        change_log_version = delta_version(self.change_log_uri, self.options)
        history = state_history(self.spark, self.root, self.db, self.table, self.options)
        state = history[-1] if history else None
        exists = table_exists(self.spark, self.uri, self.options)
        last = state.last_seq if state is not None and exists else 0
        base = state.schema if state is not None else None
        zero_dates = self.zero_dates
        line = timeline(changes, self.db, self.table, lo=last, base=base, zero_dates=zero_dates)
        cut = _first_rewrite(line) if self.held else None
        if cut is not None:  # wait before it, in the table's last complete state
            logger.info("%s.%s: re-read pending: applying up to seq %d", self.db, self.table, cut)
            line = timeline(
                changes, self.db, self.table, lo=last, hi=cut - 1, base=base, zero_dates=zero_dates
            )
        restyled = base is not None and schema_signature(
            with_zero_dates(base, zero_dates)
        ) != schema_signature(base)  # zero_dates changed: rebuild even with nothing new
        if not restyled and (line.empty or (line.target is None and line.row_changes == 0)):
            # nothing new, or only DDL of a table none of whose rows arrived yet (the new name
            # of a renamed table before its re-read)
            return self._noop(state, last, change_log_version)
        reason = _needs_rebuild(line, state, exists, self.uri, self.options)
        if reason is not None:
            if last > 0:  # rebuilds need the whole history's versions and resets
                line = timeline(
                    changes, self.db, self.table, lo=0, hi=line.hi, zero_dates=zero_dates
                )
            logger.info("%s.%s: rebuilding the mirror (%s)", self.db, self.table, reason)
            return self._rebuild(changes, line, history, change_log_version, previous=last)
        return self._merge(changes, line, history, change_log_version)

    # -- the two ways ------------------------------------------------------------------------

    def _final(self, changes: DataFrame, line: Timeline) -> DataFrame:
        assert line.target is not None
        lo = max(line.lo, line.reset_seq or 0)
        rows = change_rows(changes, self.db, self.table, lo, line.hi)
        return net_changes(key_events(rows, line), line.target)

    def _merge(
        self,
        changes: DataFrame,
        line: Timeline,
        history: list[MirrorState],
        change_log_version: int | None,
    ) -> MirrorResult:
        target = line.target
        assert target is not None
        if line.row_changes == 0:  # only DDL that left the mirror's columns alone
            return self._finish(
                line, history, change_log_version, mode="merge", counts=(0, 0, 0), previous=line.lo
            )
        # The newest change per key is written to a staging table first: the counts and the
        # MERGE then read it instead of parsing the JSON twice (Sail ignores cache()), and
        # MERGE from a table is ~5x faster on Sail than from the inline plan (measured).
        place = location_name(self.db, self.table)
        staging = join_uri(self.root, STAGING_DIR, place, uuid.uuid4().hex)
        self._final(changes, line).write.format("delta").mode("overwrite").save(staging)
        final = self.spark.read.format("delta").load(staging)
        if target.has_primary_key:
            inserted, updated, deleted = staged_counts(final, staging, target, self.options)
            source, sql = final, _merge_sql
        else:  # the MERGE's rows depend on the mirror's counts: staged before it changes
            (inserted, deleted), updated = multiset.delta_counts(final, target), 0
            mirror = self.spark.read.format("delta").load(self.uri)
            rows = f"{staging}-rows"
            multiset.merge_rows(mirror, final, target).write.format("delta").mode("overwrite").save(
                rows
            )
            source, sql = self.spark.read.format("delta").load(rows), _multiset_merge_sql
        view = f"cdc_mirror_{uuid.uuid4().hex}"
        source.createOrReplaceTempView(view)
        try:
            self.hook("computed")
            self.spark.sql(sql(self.uri, view, target)).collect()
        finally:
            self.spark.catalog.dropTempView(view)
        if not target.has_primary_key:
            _remove_staging(f"{staging}-rows", self.options)
        _remove_staging(staging, self.options)
        return self._finish(
            line,
            history,
            change_log_version,
            mode="merge",
            counts=(inserted, updated, deleted),
            previous=line.lo,
        )

    def _rebuild(
        self,
        changes: DataFrame,
        line: Timeline,
        history: list[MirrorState],
        change_log_version: int | None,
        *,
        previous: int,
    ) -> MirrorResult:
        target = line.target
        if target is None:
            raise MirrorError(
                f"{self.db}.{self.table}: the change log has rows but no `columns` for them, "
                "so the mirror's column types are unknown (change log written before "
                "cdc-platform recorded them?)",
                db=self.db,
                table=self.table,
            )
        if line.row_changes == 0 and line.reset_seq is None:
            data = self.spark.createDataFrame([], _mirror_struct(target, self.db, self.table))
        else:
            data = apply_plan(None, self._final(changes, line), target)
        self.hook("computed")
        (
            data.write.format("delta")
            .mode("overwrite")
            .option("overwriteSchema", "true")
            .save(self.uri)
        )
        facts = table_facts(self.uri, self.options)
        rows = self._rows(facts)
        return self._finish(
            line,
            history,
            change_log_version,
            mode="rebuild",
            counts=(rows, 0, 0),
            previous=previous,
            mirror_rows=rows,
            facts=facts,
        )

    def _finish(  # noqa: PLR0913 (the outcome of one apply; the figures keyword-only)
        self,
        line: Timeline,
        history: list[MirrorState],
        change_log_version: int | None,
        *,
        mode: Literal["merge", "rebuild"],
        counts: tuple[int, int, int],
        previous: int,
        mirror_rows: int | None = None,
        facts: TableFacts | None = None,
    ) -> MirrorResult:
        """``facts``: the mirror's, when the caller read them after its commit already."""
        inserted, updated, deleted = counts
        self.hook("mirror_committed")
        target = line.target
        assert target is not None
        if facts is None:
            facts = table_facts(self.uri, self.options)
        if mirror_rows is None:
            mirror_rows = self._rows(facts)
        mirror_version = facts.version if facts is not None else None
        state = MirrorState(
            apply_id=(history[-1].apply_id + 1) if history else 1,
            last_seq=line.hi,
            schema=target,
            mode=DROPPED_MODE if line.dropped is not None else mode,
            change_log_version=change_log_version,
            mirror_version=mirror_version,
            mirror_rows=mirror_rows,
            applied_at=datetime.now(UTC),
            rows_inserted=inserted,
            rows_updated=updated,
            rows_deleted=deleted,
        )
        write_state(
            self.spark,
            self.root,
            self.db,
            self.table,
            [*history, state],
            storage_options=self.options,
        )
        self.hook("state_committed")
        return MirrorResult(
            db=self.db,
            table=self.table,
            mirror_uri=self.uri,
            mode=mode,
            previous_seq=previous,
            last_seq=line.hi,
            changes=line.row_changes,
            rows_inserted=inserted,
            rows_updated=updated,
            rows_deleted=deleted,
            mirror_rows=mirror_rows,
            change_log_version=change_log_version,
            mirror_version=mirror_version,
            seconds=time.perf_counter() - self.started,
            columns=tuple(target.names),
            last_ts=line.last_ts,
            dropped=line.dropped,
        )

    def _rows(self, facts: TableFacts | None) -> int:
        """The mirror's row count: from its log when that knows, else by a Spark count."""
        if facts is not None and facts.rows is not None:
            return facts.rows
        return int(self.spark.read.format("delta").load(self.uri).count())

    def _noop(
        self, state: MirrorState | None, last: int, change_log_version: int | None
    ) -> MirrorResult:
        schema = state.schema if state is not None else None
        return MirrorResult(
            db=self.db,
            table=self.table,
            mirror_uri=self.uri,
            mode="noop",
            previous_seq=last,
            last_seq=last,
            changes=0,
            rows_inserted=0,
            rows_updated=0,
            rows_deleted=0,
            mirror_rows=state.mirror_rows if state is not None else 0,
            change_log_version=change_log_version,
            mirror_version=state.mirror_version if state is not None else None,
            seconds=time.perf_counter() - self.started,
            columns=tuple(schema.names) if schema is not None else (),
            dropped="dropped" if state is not None and state.mode == DROPPED_MODE else None,
        )


def _first_rewrite(line: Timeline) -> int | None:
    """seq of the first DDL in the range that changed the table's rows without row events
    (its re-read follows it in the change log), or None."""
    for seq, statement in line.ddls:
        effect = ddl_parser.table_effect(statement, line.db, line.table)
        if effect is not None and effect.rereads:
            return seq
    return None


def _remove_staging(staging: str, storage_options: Mapping[str, str] | None) -> None:
    """Delete this apply's staging table, and the ones interrupted applies of the same mirror
    left more than :data:`STALE_STAGING_SECONDS` ago (local disk or object store alike)."""
    table = LakeFile(staging, storage_options)
    try:
        table.delete_tree()
        _remove_stale_staging(LakeFile(staging.rstrip("/").rsplit("/", 1)[0], storage_options))
    except (SinkError, OSError) as exc:  # a leftover staging table harms nothing
        logger.warning("staging table %s not removed: %s", table, exc)


def _remove_stale_staging(folder: LakeFile) -> None:
    """Remove the tables in ``folder`` whose first commit is older than the cutoff (an
    uncommitted leftover by its folder's age where the storage has folders: local disks)."""
    cutoff = time.time() - STALE_STAGING_SECONDS
    for name in folder.folders():
        leftover = folder.child(name)
        first = leftover.child("_delta_log", FIRST_COMMIT).modified() or leftover.modified()
        if first is not None and first < cutoff:
            leftover.delete_tree()


def _mirror_struct(target: TableSchema, db: str, table: str) -> T.StructType:
    return T.StructType(
        [T.StructField(c.name, spark_type(c, db=db, table=table)) for c in target.columns]
    )


def _merge_sql(uri: str, view: str, target: TableSchema) -> str:
    """MERGE of the newest change per key: delete, update the non-key columns, insert."""
    keys = set(target.key)
    names = target.names
    rest = [n for n in names if n not in keys]
    deleted = quote_identifier(target.engine.deleted)
    clauses = [f"WHEN MATCHED AND s.{deleted} THEN DELETE"]
    if rest:
        sets = ", ".join(f"t.{quote_identifier(n)} = s.{quote_identifier(n)}" for n in rest)
        clauses.append(f"WHEN MATCHED THEN UPDATE SET {sets}")
    columns = ", ".join(quote_identifier(n) for n in names)
    values = ", ".join(f"s.{quote_identifier(n)}" for n in names)
    # every name is a quoted identifier; no value is spliced into the statement
    insert = f"INSERT ({columns}) VALUES ({values})"  # noqa: S608 (Spark SQL of quoted identifiers, no user values)
    clauses.append(f"WHEN NOT MATCHED AND NOT s.{deleted} THEN {insert}")
    head = f"MERGE INTO {delta_ref(uri)} AS t USING {quote_identifier(view)} AS s "
    return head + f"ON {key_condition(target, 't', 's')} " + " ".join(clauses)


def _multiset_merge_sql(uri: str, view: str, target: TableSchema) -> str:
    return multiset.merge_sql(delta_ref(uri), view, target)


def apply_changes(  # noqa: PLR0913 (which table of which change log; the hook keyword-only)
    spark: SparkSession,
    change_log_uri: str,
    mirror_root: str,
    db: str,
    table: str,
    *,
    hook: Hook | None = None,
    storage_options: Mapping[str, str] | None = None,
    held: bool = False,
    zero_dates: ZeroDates = "string",
) -> MirrorResult:
    """Bring the mirror of ``db.table`` up to the change log's newest row of that table.

    ``zero_dates``: how the mirror holds DATE/DATETIME/TIMESTAMP columns (``ZeroDates``:
    ``string``, the change log's text, so zero and partial dates round-trip; ``null``, typed,
    those values null). Changing it rebuilds the mirror at its next apply.

    ``held``: the table's re-read after a DDL is not complete yet
    (:func:`cdc_platform.backfill.reread.pending_rereads`): the apply stops before the first
    such DDL, so the mirror shows the table's last complete state instead of a partial copy.

    Idempotent and safe to interrupt at any point (see the module docstring). ``hook`` is
    called with "computed", "mirror_committed" and "state_committed" as the apply passes them
    (for tests that simulate crashes). ``storage_options`` are the lake's (``config.lake``):
    delta-rs and the existence checks use them; Spark reads the same store itself.

    Raises:
        MirrorError: engine or storage trouble (transient), or a change log without column
            types for the table.
        UnsupportedColumnTypeError: a source column type with no Spark type.
    """
    job = _Apply(
        spark,
        change_log_uri,
        mirror_root,
        db,
        table,
        hook=hook,
        storage_options=storage_options,
        held=held,
        zero_dates=zero_dates,
    )
    try:
        return job.run()
    except CdcError:
        raise
    except Exception as exc:  # pyspark / grpc / py4j errors: translate at this boundary
        if type(exc).__module__.startswith(("pyspark", "py4j", "grpc")):
            raise MirrorError(
                f"{db}.{table}: applying the change log to {job.uri} failed: "
                f"{type(exc).__name__}: {str(exc)[:2000]}",
                db=db,
                table=table,
            ) from exc
        raise
