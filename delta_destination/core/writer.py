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
from .memory import check_budget, table_size
from .model import TableSchema
from .sql import OP_APPEND, OP_DELETE, OP_UPDATE, OP_UPSERT, insert_sql, key_probe_sql, merge_sql
from .target_files import batch_key_values
from .write_plan import APPEND, PROBE, WriteFacts, WritePlan, plan_write
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


def plan_for(t: OpenTable, keys: list[str], batch_keys: dict, source_bytes: int, history: bool = False,
             new_keys: Optional[pa.Table] = None, after_commit: tuple[str, ...] = ()) -> WritePlan:
    """The keyed write's plan (core/write_plan.py) from what the open table knows, logged in one line."""
    plan = plan_write(WriteFacts(t.display, t.table, tuple(keys), batch_keys, source_bytes, t.snapshot(),
                                 t.lease.choice, t.lease.request, t.lease.router.spark_available(t.lease.request),
                                 history, new_keys, after_commit))
    log.info(plan.line())
    return plan


def before_merge(t: OpenTable, plan: WritePlan, guard: Optional["CommitGuard"]) -> None:
    """What the plan does before its MERGE: refuse it over the memory budget (nothing written),
    move the lease to the MERGE's engine, set the table properties it wants first (one
    metadata-only commit, once per table: a crash after it leaves the data as before the
    request, and its replay skips it; the door's `guard` is asked first)."""
    if plan.refused:
        check_budget(t.display, t.eng.name, table_size(t.snapshot()), plan.memory.estimate, plan.memory.budget)
    if plan.moves:
        t.lease.move_to(plan.engine)
    change = plan.properties_first
    if change is not None and t.table is not None:
        if guard is not None:
            guard()
        log.info(f"{t.display}: {change.why}")
        t.eng.set_properties(f"set properties of {t.display}", t.ref.location, change.properties)


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
        ref = self.registry.locate(settings, schema, table_name)
        ahead = self.registry.read_ahead(settings, ref, read)
        with self.registry.opened(settings, schema, table_name, what, batch_bytes=ahead and ahead.batch_bytes,
                                  ref=ref) as t:
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
        plan = plan_for(t, keys, batch_key_values(source, t.table, keys), source.nbytes, new_keys=source,
                        after_commit=self.registry.after_commit_steps(t.settings))
        with t.eng.shipped(source, t.warehouse) as view:
            if plan.statement == APPEND or (plan.statement == PROBE and not t.eng.rows(
                    f"probe keys of {t.display}", key_probe_sql(t.sql_name, view, t.table, keys))):
                # Nothing to update or delete (initial syncs, new keys): a plain append of the
                # upserts, still one commit, no rewrite of existing files.
                if OP_UPSERT in ops:
                    commit(t, f"append to {t.display}", insert_sql(t.sql_name, view, t.table), guard)
                return
            if not plan.moves:
                before_merge(t, plan, guard)
                commit(t, f"merge into {t.display}", merge_sql(t.sql_name, view, t.table, keys, ops, flagged, newer_by,
                                                               plan.target_predicate), guard)
                return
        # The plan hands the MERGE to Apache Spark (memory): the source goes there.
        before_merge(t, plan, guard)
        with t.eng.shipped(source, t.warehouse) as view:
            sql = merge_sql(t.sql_name, view, t.table, keys, ops, flagged, newer_by, plan.target_predicate)
            commit(t, f"merge into {t.display}", sql, guard)


def commit(t: OpenTable, action: str, sql: str, guard: Optional[CommitGuard]) -> None:
    """The request's one commit statement, each attempt after the door's last word (`guard`)."""
    t.eng.execute(action, sql, before_each=guard)
