"""Applying a change set: every upsert, update and delete of one request in ONE commit.

The pieces are stacked into one positional merge source (see sql.py) and applied by
one MERGE statement, or -- when no key of the batch is stored yet (initial syncs, new
keys) -- by one plain append that rewrites nothing. One statement = one Delta commit,
so a crash leaves the table before or after the request, and a replay converges.
"""
from __future__ import annotations

import time
from typing import Callable, Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .. import logs
from ..errors import SchemaMismatch, ValueConversionError
from ..settings import Settings
from .registry import TableRegistry, OpenTable
from .changes import ChangeSet, Changes, CommitResult, Op
from .key_ranges import keys_cannot_match
from .memory import check_budget
from .model import TableSchema
from .sql import OP_APPEND, OP_DELETE, OP_UPDATE, OP_UPSERT, insert_sql, key_probe_sql, merge_sql
from .target_files import batch_key_values, target_predicate
from .types import arrow_type

log = logs.get(__name__)

_SQL_OP = {Op.UPSERT: OP_UPSERT, Op.UPDATE: OP_UPDATE, Op.DELETE: OP_DELETE, Op.APPEND: OP_APPEND}


def merge_keys_of(table: TableSchema, display: str) -> list[str]:
    keys = table.merge_keys()
    if not keys:
        raise SchemaMismatch(f"table {display} has neither primary key nor _fivetran_id")
    return keys


def check_keys(part: Changes, keys: list[str]) -> None:
    """Every key column present and never NULL (an unmodified marker in a key is NULL too)."""
    for k in keys:
        if k not in part.values.column_names:
            raise SchemaMismatch(f"{part.source}: key column {k!r} is missing")
        col = part.values.column(k)
        if col.null_count:
            row = pc.index(pc.is_null(col), True).as_py() + 1
            raise ValueConversionError(f"{part.source}: key column {k!r} row {row}: NULL or unmodified key")


def positional_arrays(part: Changes, table: TableSchema):
    """Per table column: the typed values and the keep-stored-value flag (array, True, or None)."""
    arrays, flags = [], []
    n = part.num_rows
    for c in table.columns:
        typ = arrow_type(c)
        if c.name in part.values.column_names:
            arrays.append(part.values.column(c.name).cast(typ))
            if part.keep is not None and c.name in part.keep.column_names:
                flags.append(pc.fill_null(part.keep.column(c.name), False))
            else:
                flags.append(None)
        else:
            # Column absent: keep the stored value (NULL on insert).
            arrays.append(pa.nulls(n, typ))
            flags.append(True)
        if part.op == Op.DELETE:
            flags[-1] = None  # irrelevant: deleted rows are not updated
    return arrays, flags


def merge_source(changes: ChangeSet, table: TableSchema, keys: list[str]) -> pa.Table:
    """The stacked positional source: op, c<i> values, u<i> flags where any cell keeps. The
    parts are stacked without a copy (a 1M-row, 20-column source: 0.5 s less); shipping decides
    the form the engine gets."""
    cols = table.columns
    key_set = set(keys)
    needs_flag = [False] * len(cols)
    pieces = []
    for part in changes.parts:
        arrays, flags = positional_arrays(part, table)
        for i, f in enumerate(flags):
            if cols[i].name in key_set:
                continue
            if f is True or (f is not None and pc.any(f).as_py()):
                needs_flag[i] = True
        pieces.append((_SQL_OP[part.op], part.num_rows, arrays, flags))
    out = []
    for op, n, arrays, flags in pieces:
        names, values = ["op"], [pa.array(np.full(n, op, dtype=np.int8))]
        for i, arr in enumerate(arrays):
            names.append(f"c{i}")
            values.append(arr)
        for i, need in enumerate(needs_flag):
            if not need:
                continue
            f = flags[i]
            if f is True or f is None:
                f = pa.array(np.full(n, f is True, dtype=np.bool_))
            names.append(f"u{i}")
            values.append(f)
        out.append(pa.Table.from_arrays(values, names=names))
    if not out:
        return pa.table({})
    return pa.concat_tables(out)


def check_duplicates(source: pa.Table, table: TableSchema, keys: list[str]) -> None:
    if source.num_rows < 2:
        return
    idx = [f"c{table.column_names.index(k)}" for k in keys]
    if len(idx) == 1:   # one key column: a hash set of its values, 3x faster than a grouping
        distinct = len(pc.unique(source.column(idx[0])))
    else:
        distinct = source.select(idx).group_by(idx).aggregate([([], "count_all")]).num_rows
    if distinct != source.num_rows:
        raise SchemaMismatch(
            "the batch holds the same primary key more than once (Fivetran sends each key at most once per batch)")


def source_ops(source: pa.Table) -> set[int]:
    return set(pc.unique(source.column("op")).to_pylist())


def flagged_columns(source: pa.Table) -> set[int]:
    return {int(n[1:]) for n in source.column_names if n.startswith("u")}


def skipping_filter(t: OpenTable, keys: list[str], batch_keys: dict[str, pa.Array]) -> Optional[str]:
    """The predicate on the target that lets the engine skip files for this keyed write
    (core/target_files.py), or None: on an engine that reads every file whatever the predicate
    (the dialect says), or where the Delta log shows that every file can hold a batch key. Where
    the log cannot be read here the predicate is given (it never changes a result)."""
    if not t.eng.dialect.merge_skips_files_by_target_predicate:
        return None
    touched = t.touched(keys, batch_keys)
    if touched is not None:
        log.info(f"merge into {t.display}: {touched.describe()} ({touched.bytes} of {touched.of_bytes} bytes)")
        if not touched.skips_any:
            return None
    return target_predicate(t.table, keys, batch_keys)


def guard_merge(t: OpenTable, source: pa.Table) -> bool:
    """Before a MERGE on an engine whose MERGE memory grows with the table (the router knows
    which): the router may move the request to another engine before anything is written (True:
    moved, the caller ships the source again); over the memory budget where it cannot, the
    request is refused (MemoryBudgetExceeded)."""
    if not t.lease.guards_merge_memory:
        return False
    size = t.measured()
    if size is None:
        return False
    engine = t.eng.name
    plan = t.lease.plan_merge(size.bytes, source.nbytes)
    log.info(f"merge into {t.display}: {size.files} files, {size.bytes} bytes; estimated peak {plan.estimate} bytes, "
             f"budget {plan.budget}")
    if plan.refused:
        check_budget(t.display, engine, size, plan.estimate, plan.budget)
    return plan.moved


# Called right before the engine's commit statement, under the table's lock; raises (a
# DestinationError) to abandon the commit with nothing written: e.g. a door whose host is gone.
CommitGuard = Callable[[], None]


class Writer:
    """Applies change sets to live tables (upserts, partial updates, hard deletes)."""

    def __init__(self, registry: TableRegistry):
        self.registry = registry

    def write(self, settings: Settings, schema: str, table_name: str,
              read: Callable[[TableSchema], ChangeSet], what: str = "WriteBatch",
              guard: Optional[CommitGuard] = None) -> CommitResult:
        """`read` gets the table's current schema and returns the change set in its types (it
        runs before the table's lock is taken, and again under it only if the schema changed
        meanwhile: TableRegistry.read_ahead); the whole set is one commit."""
        start = time.monotonic()
        ahead = self.registry.read_ahead(settings, schema, table_name, read)
        with self.registry.opened(settings, schema, table_name, what, batch_bytes=ahead and ahead.batch_bytes) as t:
            table = t.table
            changes = t.input(read, ahead)
            appends = changes.of(Op.APPEND)
            if appends and len(appends) != len(changes.parts):
                raise SchemaMismatch(f"{what} {t.display}: appends cannot be mixed with keyed changes in one commit")
            keys = [] if appends else merge_keys_of(table, t.display)
            for part in changes.parts:
                check_keys(part, keys)
            for c in changes.newer_by:
                if not table.has(c):
                    raise SchemaMismatch(f"{what} {t.display}: ordering column {c!r} is not in the table")
            counts = dict(upserts=changes.count(Op.UPSERT) + changes.count(Op.APPEND), updates=changes.count(Op.UPDATE),
                          deletes=changes.count(Op.DELETE))
            if changes.num_rows == 0:
                log.info(f"{what} {t.display}: no rows, nothing to commit")
                return CommitResult(t.display, t.ref.location, **counts, seconds=time.monotonic() - start)
            source = merge_source(changes, table, keys)
            if appends:
                self._append(t, source, guard)
            else:
                check_duplicates(source, table, keys)
                self._apply(t, keys, source, changes.newer_by, guard)
            t.outcome.committed = True
            t.outcome.inserted, t.outcome.updated, t.outcome.deleted = counts["upserts"], counts["updates"], counts["deletes"]
        took = time.monotonic() - start
        log.info(f"{what} {t.display}: {counts['upserts']} upserts, {counts['updates']} updates, "
                 f"{counts['deletes']} deletes in one commit, {took:.2f}s, {t.served_by}")
        return CommitResult(t.display, t.ref.location, **counts, committed=True, seconds=took)

    def _append(self, t: OpenTable, source: pa.Table, guard: Optional[CommitGuard]) -> None:
        with t.eng.shipped(source, t.warehouse) as view:
            sql = insert_sql(t.sql_name, view, t.table, OP_APPEND)
            commit(t, f"append to {t.display}", sql, guard)

    def _apply(self, t: OpenTable, keys: list[str], source: pa.Table, newer_by: tuple[str, ...],
               guard: Optional[CommitGuard]) -> None:
        ops, flagged = source_ops(source), flagged_columns(source)
        with t.eng.shipped(source, t.warehouse) as view:
            new_keys_only = keys_cannot_match(t.ref, t.table, keys, source)  # from the log, no engine
            if not new_keys_only and t.eng.dialect.probes_keys_before_merge(lambda: getattr(t.measured(), "bytes", None)):
                probe = key_probe_sql(t.sql_name, view, t.table, keys)
                new_keys_only = not t.eng.rows(f"probe keys of {t.display}", probe)
            if new_keys_only:
                # Fast path (initial syncs, new keys): nothing to update or delete, so a plain
                # append of the upserts -- still one commit, no rewrite of existing files.
                if OP_UPSERT in ops:
                    commit(t, f"append to {t.display}", insert_sql(t.sql_name, view, t.table), guard)
                return
            batch_keys = batch_key_values(source, t.table, keys)
            if not guard_merge(t, source):
                self.registry.prepare_rewrite(t, guard)
                sql = merge_sql(t.sql_name, view, t.table, keys, ops, flagged, newer_by,
                                skipping_filter(t, keys, batch_keys))
                commit(t, f"merge into {t.display}", sql, guard)
                return
        # Moved to Apache Spark by the memory guard (engine auto): the source goes there.
        self.registry.prepare_rewrite(t, guard)
        with t.eng.shipped(source, t.warehouse) as view:
            sql = merge_sql(t.sql_name, view, t.table, keys, ops, flagged, newer_by, skipping_filter(t, keys, batch_keys))
            commit(t, f"merge into {t.display}", sql, guard)


def commit(t: OpenTable, action: str, sql: str, guard: Optional[CommitGuard]) -> None:
    """The request's one commit statement, each attempt after the door's last word (`guard`)."""
    t.eng.execute(action, sql, before_each=guard)
