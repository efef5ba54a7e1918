"""WriteHistoryBatch (history mode, SCD type 2) in ONE Delta MERGE.

SEMANTICS.md orders the files: earliest_start, update, replace, delete. The
effect per key is computed up front, in Arrow, from the batch and the key's
current versions read from the table; the result is a set of row actions keyed
by (primary key, _fivetran_start) applied by one MERGE, so the table is either
before or after the batch and a replay converges (a replay's versions are at or
after the earliest start, so they are deleted/replaced again, never doubled).

Per key k with new versions or an earliest_start row, eff(k) = the earliest
start named in earliest_start_files, or the earliest new version if none:
  1. stored versions with _fivetran_start >= eff(k) are deleted (or replaced by
     a new version with the same start); the latest stored version before eff
     (normally the active one) is closed if still open at eff:
     _fivetran_active = false, _fivetran_end = eff(k) - 1 ms;
  2. update versions fill their unmodified columns from the key's version that was
     active before the batch (that latest stored version before eff, so a replay,
     which finds it already closed, fills the same values) -- every update version
     of the key, as the SDK's guide has it; a key with no stored version continues
     from the previous new version of the batch. An update for a key with no
     previous version at all is ignored, as updates of missing rows are in live mode;
  3. replace versions are inserted as given;
  4. a delete closes the key's active version (the newest new version if any)
     with the file's _fivetran_end.
Each new version keeps the _fivetran_end / _fivetran_active its file gives; where
a file leaves them out, versions of one key are chained: each but the newest gets
_fivetran_end = next start - 1 ms and _fivetran_active = false, the newest is
active with the maximum _fivetran_end.
"""
from __future__ import annotations

import time
from typing import Callable, Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .. import logs
from ..errors import SchemaMismatch
from ..settings import Settings
from .writer import CommitGuard, before_merge, check_keys, commit, plan_for, positional_arrays
from .registry import TableRegistry, OpenTable
from .changes import ChangeSet, Changes, CommitResult, Op
from .model import ACTIVE, END, START, TableSchema
from .sql import H_CLOSE as OP_CLOSE, H_DELETE as OP_DELETE, H_UPSERT as OP_UPSERT
from .sql import history_current_versions_sql, history_merge_sql
from .types import arrow_type

log = logs.get(__name__)

MAX_END_US = 253402300799999000  # 9999-12-31T23:59:59.999Z in microseconds
ONE_MS = 1000  # microseconds


def us(arr) -> np.ndarray:
    """Timestamps as int64 microseconds."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    return arr.cast(pa.int64()).to_numpy(zero_copy_only=False)


def history_keys(table: TableSchema, display: str) -> list[str]:
    """The real key columns of a history-mode table (its primary key without _fivetran_start)."""
    for c in (START, END, ACTIVE):
        if not table.has(c):
            raise SchemaMismatch(f"table {display} is not a history-mode table: column {c} is missing")
    if not table.get(START).primary_key:
        raise SchemaMismatch(f"table {display}: {START} is not part of the primary key")
    keys = [k for k in table.primary_keys if k != START]
    if not keys:
        raise SchemaMismatch(f"table {display} has no key besides {START}")
    return keys


class HistoryWriter:
    """Applies history-mode change sets (earliest-start, update, replace and delete pieces)."""

    def __init__(self, registry: TableRegistry):
        self.registry = registry

    def write(self, settings: Settings, schema: str, table_name: str,
              read: Callable[[TableSchema], ChangeSet], what: str = "WriteHistoryBatch",
              guard: Optional[CommitGuard] = None) -> CommitResult:
        start_time = time.monotonic()
        ref = self.registry.locate(settings, schema, table_name)
        ahead = self.registry.read_ahead(settings, ref, read)   # before the lock (Writer.write)
        with self.registry.opened(settings, schema, table_name, what, batch_bytes=ahead and ahead.batch_bytes,
                                  ref=ref) as t:
            table = t.table
            keys = history_keys(table, t.display)
            rows = _Planner(table, keys)
            changes = t.input(read, ahead)
            counts = rows.add(changes)
            result = dict(upserts=counts["replace"], updates=counts["update"], deletes=counts["delete"])
            if rows.empty:
                log.info(f"{what} {t.display}: no rows, nothing to commit")
                return CommitResult(t.display, t.ref.location, **result, seconds=time.monotonic() - start_time)
            key_starts = rows.key_starts()
            batch_keys = {k: key_starts.column(f"k{i}") for i, k in enumerate(keys)}
            plan = plan_for(t, keys, batch_keys, changes.nbytes, history=True, after_commit=self.registry.after_commit_steps(t.settings))
            # The read of the current versions runs on the engine the table was opened on: the plan's
            # predicate where that is also the MERGE's engine (a moved MERGE leaves Sail, which reads
            # every file anyway).
            current = self._current_versions(t, rows, key_starts, None if plan.moves else plan.target_predicate)
            source = rows.actions(current)
            if source.num_rows:
                before_merge(t, plan, guard)
                with t.eng.shipped(source, t.warehouse) as view:
                    sql = history_merge_sql(t.sql_name, view, table, keys, START, END, ACTIVE, plan.target_predicate)
                    commit(t, f"merge into {t.display}", sql, guard)
                t.outcome.committed = True
                t.outcome.inserted, t.outcome.updated, t.outcome.deleted = counts["replace"] + counts["update"], 0, counts["delete"]
        took = time.monotonic() - start_time
        log.info(
            f"{what} {t.display}: {counts['earliest']} earliest-start, {counts['update']} update, "
            f"{counts['replace']} replace, {counts['delete']} delete rows in one commit, {took:.2f}s, {t.served_by}"
        )
        return CommitResult(t.display, t.ref.location, **result, committed=bool(source.num_rows), seconds=took)

    def _current_versions(self, t: OpenTable, rows: "_Planner", key_starts: pa.Table,
                          target_filter: Optional[str]) -> pa.Table:
        """The stored versions a batch can touch, for the batch's keys: the active one, those at or
        after eff, and the latest one before eff (the version new ones continue from)."""
        with t.eng.shipped(key_starts, t.warehouse) as view:
            sql = history_current_versions_sql(t.sql_name, view, rows.keys, START, ACTIVE, target_filter)
            got = t.eng.arrow("read current versions", sql)
        cols = [got.column(c.name).cast(arrow_type(c)) for c in t.table.columns]
        return pa.Table.from_arrays(cols, names=t.table.column_names)


class _Planner:
    """Reads the files and turns them into row actions (Arrow/numpy, no per-row Python)."""

    def __init__(self, table: TableSchema, keys: list[str]):
        self.table = table
        self.keys = keys
        self.names = table.column_names
        self.idx = {n: i for i, n in enumerate(self.names)}
        self.key_fields = [pa.field(f"k{i}", arrow_type(table.get(k))) for i, k in enumerate(keys)]
        self.start_type = arrow_type(table.get(START))
        self.earliest: list[pa.Table] = []   # k0.., start
        self.versions: list[pa.Table] = []   # c0.., u0.., is_update
        self.deletes: list[pa.Table] = []    # k0.., end

    @property
    def empty(self) -> bool:
        return not (self.earliest or self.versions or self.deletes)

    # -- reading ---------------------------------------------------------------------------
    _KINDS = {Op.EARLIEST_START: "earliest", Op.UPDATE: "update", Op.UPSERT: "replace", Op.DELETE: "delete"}

    def add(self, changes: ChangeSet) -> dict:
        """Takes the pieces in the SDK's order (earliest_start, update, replace, delete)."""
        counts = {"earliest": 0, "update": 0, "replace": 0, "delete": 0}
        for op in (Op.EARLIEST_START, Op.UPDATE, Op.UPSERT, Op.DELETE):
            for part in changes.of(op):
                kind = self._KINDS[op]
                check_keys(part, self.keys)
                if part.num_rows:
                    counts[kind] += part.num_rows
                    self._add(kind, part)
        return counts

    def _required(self, part: Changes, col: str) -> pa.ChunkedArray:
        if col not in part.values.column_names:
            raise SchemaMismatch(f"{part.source}: column {col!r} is missing")
        arr = part.values.column(col)
        if arr.null_count:
            row = pc.index(pc.is_null(arr), True).as_py() + 1
            raise SchemaMismatch(f"{part.source}: column {col!r} row {row} is NULL or unmodified")
        return arr

    def _keys_of(self, part: Changes) -> dict:
        return {f"k{i}": part.values.column(k) for i, k in enumerate(self.keys)}

    def _add(self, kind: str, part: Changes) -> None:
        if kind == "earliest":
            self.earliest.append(pa.table({**self._keys_of(part), "t": self._required(part, START)}))
            return
        if kind == "delete":
            self.deletes.append(pa.table({**self._keys_of(part), "t": self._required(part, END)}))
            return
        self._required(part, START)
        arrays, flags = positional_arrays(part, self.table)
        n = part.num_rows
        cols = {f"c{i}": a for i, a in enumerate(arrays)}
        for i, f in enumerate(flags):
            if kind == "replace" or f is None or f is False:
                f = np.zeros(n, dtype=bool)
            elif f is True:
                f = np.ones(n, dtype=bool)
            else:
                f = np.asarray(f.to_numpy(zero_copy_only=False), dtype=bool)
            cols[f"u{i}"] = pa.array(f)
        cols["is_update"] = pa.array(np.full(n, kind == "update"))
        self.versions.append(pa.table(cols))

    # -- planning --------------------------------------------------------------------------
    def _version_table(self) -> pa.Table:
        return pa.concat_tables(self.versions) if self.versions else None

    def _keys_from(self, t: pa.Table, layout: str) -> pa.Table:
        """Key columns as k0..kn from a table laid out by column name, k<i> or c<i> (positional)."""
        if layout == "named":
            cols = [t.column(k) for k in self.keys]
        elif layout == "k":
            cols = [t.column(f"k{i}") for i in range(len(self.keys))]
        else:
            cols = [t.column(f"c{self.idx[k]}") for k in self.keys]
        return pa.Table.from_arrays([c.cast(f.type) for c, f in zip(cols, self.key_fields)], schema=pa.schema(self.key_fields))

    def key_starts(self) -> pa.Table:
        """Distinct batch keys k0..kn with eff (NULL for keys that only have a delete)."""
        parts = []
        for e in self.earliest:
            parts.append((self._keys_from(e, "k"), e.column("t")))
        v = self._version_table()
        if v is not None:
            parts.append((self._keys_from(v, "c"), v.column(f"c{self.idx[START]}")))
        for d in self.deletes:
            parts.append((self._keys_from(d, "k"), pa.nulls(d.num_rows, self.start_type)))
        tables = [k.append_column("eff", t.cast(self.start_type)) for k, t in parts]
        allk = pa.concat_tables(tables)
        names = [f.name for f in self.key_fields]
        agg = allk.group_by(names).aggregate([("eff", "min")])
        return agg.select(names + ["eff_min"]).rename_columns(names + ["eff"])

    def actions(self, current: pa.Table) -> pa.Table:
        return _Actions(self, current).build()


class _Actions:
    """The per-key arithmetic of history mode, vectorised over key ids."""

    def __init__(self, p: _Planner, current: pa.Table):
        self.p = p
        self.current = current
        names = [f.name for f in p.key_fields]
        sources = [p._keys_from(current, "named") if current.num_rows else None]
        v = p._version_table()
        self.v = v
        sources += [p._keys_from(e, "k") for e in p.earliest]
        sources += [p._keys_from(v, "c")] if v is not None else []
        sources += [p._keys_from(d, "k") for d in p.deletes]
        allk = pa.concat_tables([s for s in sources if s is not None])
        distinct = allk.group_by(names).aggregate([])
        self.distinct = distinct.append_column("kid", pa.array(np.arange(distinct.num_rows, dtype=np.int64)))
        self.nk = distinct.num_rows
        self.names = names

    def kid(self, keys: pa.Table) -> np.ndarray:
        t = keys.append_column("_row", pa.array(np.arange(keys.num_rows, dtype=np.int64)))
        j = t.join(self.distinct, keys=self.names, join_type="inner")
        j = j.sort_by("_row")
        assert j.num_rows == keys.num_rows
        return j.column("kid").to_numpy()

    def build(self) -> pa.Table:
        p, cur, v = self.p, self.current, self.v
        INF = np.iinfo(np.int64).max
        # eff per key
        eff = np.full(self.nk, INF, dtype=np.int64)
        for e in p.earliest:
            np.minimum.at(eff, self.kid(p._keys_from(e, "k")), us(e.column("t")))
        if v is not None:
            v_kid = self.kid(p._keys_from(v, "c"))
            v_start = us(v.column(f"c{p.idx[START]}"))
            np.minimum.at(eff, v_kid, v_start)
        has_eff = eff != INF

        # stored versions
        c_kid = self.kid(p._keys_from(cur, "named")) if cur.num_rows else np.zeros(0, dtype=np.int64)
        c_start = us(cur.column(START)) if cur.num_rows else np.zeros(0, dtype=np.int64)
        c_active = (np.asarray(cur.column(ACTIVE).fill_null(False).to_numpy(zero_copy_only=False), dtype=bool)
                    if cur.num_rows else np.zeros(0, dtype=bool))
        c_end = us(cur.column(END)) if cur.num_rows else np.zeros(0, dtype=np.int64)
        c_del = has_eff[c_kid] & (c_start >= eff[c_kid])
        # base = the version new ones continue from: the latest stored one before eff, or, for keys
        # without new versions, the active one (the latest, if against the rules several are active)
        base_row = np.full(self.nk, -1, dtype=np.int64)
        cand = np.nonzero(np.where(has_eff[c_kid], c_start < eff[c_kid], c_active))[0]
        if cand.size:
            order = cand[np.lexsort((c_start[cand], c_kid[cand]))]
            base_row[c_kid[order]] = order  # later (greater start) wins
        has_base = base_row >= 0
        base_active = np.zeros(self.nk, dtype=bool)
        base_active[has_base] = c_active[base_row[has_base]]
        close_end = np.full(cur.num_rows, -1, dtype=np.int64)
        # step 1 closes the base where it is still open at eff (a replay finds it closed already)
        e_close = np.nonzero(has_base & has_eff)[0]
        e_close = e_close[base_active[e_close] | (c_end[base_row[e_close]] >= eff[e_close])]
        close_end[base_row[e_close]] = eff[e_close] - ONE_MS

        # deletes: last delete per key wins
        d_end = np.full(self.nk, -1, dtype=np.int64)
        has_d = np.zeros(self.nk, dtype=bool)
        for d in p.deletes:
            dk = self.kid(p._keys_from(d, "k"))
            d_end[dk] = us(d.column("t"))
            has_d[dk] = True

        parts = []
        v_keep_kid = np.zeros(0, dtype=np.int64)
        if v is not None:
            vt, v_kid, v_start, flags = self._versions(v, v_kid, v_start, base_row, has_base)
            if vt is not None:
                v_keep_kid = v_kid
                end, active = self._chain(vt, v_kid, v_start, flags)
                # a delete in the same batch closes the key's active version
                last = np.ones(vt.num_rows, dtype=bool)
                last[:-1] = v_kid[1:] != v_kid[:-1]
                dl = last & active & has_d[v_kid]
                end[dl] = d_end[v_kid[dl]]
                active[dl] = False
                vt = self._set(vt, END, end)
                vt = self._set_bool(vt, ACTIVE, active)
                parts.append(self._with_op(vt, OP_UPSERT))
                # stored rows replaced in place by a new version with the same start are upserts, not deletes
                if cur.num_rows:
                    c_del &= ~_isin_pairs(c_kid, c_start, v_kid, v_start)
        # deletes of keys without new versions close the surviving active stored version (unless eff closed it)
        has_v = np.zeros(self.nk, dtype=bool)
        has_v[v_keep_kid] = True
        d_only = np.nonzero(has_d & ~has_v & has_base & base_active & ~has_eff)[0]
        close_end[base_row[d_only]] = d_end[d_only]

        if cur.num_rows:
            cur_pos = self._positional(cur)
            dels = np.nonzero(c_del)[0]
            if dels.size:
                parts.append(self._with_op(cur_pos.take(pa.array(dels)), OP_DELETE))
            closes = np.nonzero((close_end >= 0) & ~c_del)[0]
            if closes.size:
                ct = cur_pos.take(pa.array(closes))
                ct = self._set(ct, END, close_end[closes])
                ct = self._set_bool(ct, ACTIVE, np.zeros(closes.size, dtype=bool))
                parts.append(self._with_op(ct, OP_CLOSE))
        if not parts:
            return pa.table({})
        return pa.concat_tables(parts).combine_chunks()

    # -- helpers ---------------------------------------------------------------------------
    def _positional(self, cur: pa.Table) -> pa.Table:
        return pa.Table.from_arrays([cur.column(n) for n in self.p.names], names=[f"c{i}" for i in range(len(self.p.names))])

    def _set(self, t: pa.Table, col: str, us: np.ndarray) -> pa.Table:
        i = self.p.idx[col]
        typ = arrow_type(self.p.table.get(col))
        return t.set_column(t.column_names.index(f"c{i}"), f"c{i}", pa.array(us, pa.int64()).cast(typ))

    def _set_bool(self, t: pa.Table, col: str, values: np.ndarray) -> pa.Table:
        i = self.p.idx[col]
        return t.set_column(t.column_names.index(f"c{i}"), f"c{i}", pa.array(values, pa.bool_()))

    def _with_op(self, t: pa.Table, op: int) -> pa.Table:
        t = t.select([f"c{i}" for i in range(len(self.p.names))])
        return t.append_column("op", pa.array(np.full(t.num_rows, op, dtype=np.int8)))

    def _versions(self, v: pa.Table, v_kid, v_start, base_row, has_base):
        """Sort, validate, drop updates with nothing to fill from, forward-fill unmodified columns."""
        p = self.p
        order = np.lexsort((v_start, v_kid))
        v, v_kid, v_start = v.take(pa.array(order)), v_kid[order], v_start[order]
        dup = (v_kid[1:] == v_kid[:-1]) & (v_start[1:] == v_start[:-1])
        if dup.any():
            raise SchemaMismatch(f"the batch holds two versions of one key with the same {START}")
        ncols = len(p.names)
        flags = np.column_stack([np.asarray(v.column(f"u{i}").to_numpy(zero_copy_only=False), dtype=bool) for i in range(ncols)]) \
            if v.num_rows else np.zeros((0, ncols), dtype=bool)
        is_update = np.asarray(v.column("is_update").to_numpy(zero_copy_only=False), dtype=bool)
        needs_fill = is_update & flags.any(axis=1)
        # an update whose key has no earlier version (stored active or earlier in the batch) is ignored
        keep = np.ones(v.num_rows, dtype=bool)
        while True:
            idx = np.nonzero(keep)[0]
            k = v_kid[idx]
            first = np.ones(idx.size, dtype=bool)
            first[1:] = k[1:] != k[:-1]
            orphan = first & is_update[idx] & ~has_base[k]
            if not orphan.any():
                break
            keep[idx[orphan]] = False
        if not keep.all():
            sel = np.nonzero(keep)[0]
            v, v_kid, v_start, flags = v.take(pa.array(sel)), v_kid[sel], v_start[sel], flags[sel]
            needs_fill, is_update = needs_fill[sel], is_update[sel]
        if v.num_rows == 0:
            return None, v_kid, v_start, flags
        vt = v.select([f"c{i}" for i in range(ncols)])
        if needs_fill.any():
            vt = self._fill(vt, v_kid, flags, base_row, has_base)
        return vt, v_kid, v_start, flags

    def _chain(self, vt: pa.Table, v_kid, v_start, flags) -> tuple[np.ndarray, np.ndarray]:
        """_fivetran_end / _fivetran_active of the new versions: each row keeps the values its
        file gives (the SDK: "each row keeps its own"); where a file leaves them out (or marks
        them unmodified), versions of a key are chained -- all but the newest end at the next
        start - 1 ms, inactive; the newest is active until the maximum timestamp."""
        p = self.p
        last = np.ones(vt.num_rows, dtype=bool)
        last[:-1] = v_kid[1:] != v_kid[:-1]
        end = np.where(last, MAX_END_US, np.append(v_start[1:], 0) - ONE_MS)
        active = last.copy()
        i_end, i_active = p.idx[END], p.idx[ACTIVE]
        given_end = ~flags[:, i_end] & np.asarray(vt.column(f"c{i_end}").is_valid().to_numpy(zero_copy_only=False), bool)
        given_active = ~flags[:, i_active] & np.asarray(vt.column(f"c{i_active}").is_valid().to_numpy(zero_copy_only=False), bool)
        if given_end.any():
            end = np.where(given_end, us(vt.column(f"c{i_end}").fill_null(0)), end)
        if given_active.any():
            file_active = np.asarray(vt.column(f"c{i_active}").fill_null(False).to_numpy(zero_copy_only=False), bool)
            active = np.where(given_active, file_active, active)
        return end, active

    def _fill(self, vt: pa.Table, v_kid, flags, base_row, has_base) -> pa.Table:
        """Unmodified cells take the value of the key's version that was active before the
        batch (the SDK: "the last active record in the destination", i.e. the one the
        earliest-start step closed) -- for every update version of the key in the batch.
        A key with no stored version continues from the previous version of the batch."""
        p, cur = self.p, self.current
        kids_with_base = np.unique(v_kid[has_base[v_kid]])
        base_idx = base_row[kids_with_base]
        base = self._positional(cur).take(pa.array(base_idx)) if kids_with_base.size else None
        # combined = base rows first within each key, then the versions (already sorted by key, start)
        if base is not None:
            comb = pa.concat_tables([base.cast(vt.schema), vt])
            kid = np.concatenate([kids_with_base, v_kid])
            rank = np.concatenate([np.zeros(kids_with_base.size, dtype=np.int64), np.arange(1, v_kid.size + 1)])
            fl = np.vstack([np.zeros((kids_with_base.size, flags.shape[1]), dtype=bool), flags])
        else:
            comb, kid, rank, fl = vt, v_kid, np.arange(v_kid.size), flags
        order = np.lexsort((rank, kid))
        comb, kid, fl = comb.take(pa.array(order)), kid[order], fl[order]
        is_version = np.concatenate([np.zeros(0 if base is None else kids_with_base.size, dtype=bool),
                                     np.ones(v_kid.size, dtype=bool)])[order]
        pos = np.arange(comb.num_rows)
        new_group = np.ones(kid.size, dtype=bool)
        new_group[1:] = kid[1:] != kid[:-1]
        group_start = np.maximum.accumulate(np.where(new_group, pos, 0))
        from_base = has_base[kid]  # the group starts with the stored base row
        cols = []
        for i in range(len(p.names)):
            col = comb.column(f"c{i}")
            if fl[:, i].any():
                chained = np.maximum.accumulate(np.where(~fl[:, i], pos, -1))
                src = np.where(fl[:, i] & from_base, group_start, chained)
                col = col.take(pa.array(src))
            cols.append(col)
        filled = pa.Table.from_arrays(cols, names=[f"c{i}" for i in range(len(p.names))])
        return filled.take(pa.array(np.nonzero(is_version)[0]))


def _isin_pairs(a_kid, a_start, b_kid, b_start) -> np.ndarray:
    """Row-wise membership of (kid, start) pairs, vectorised with an Arrow semi join."""
    out = np.zeros(a_kid.size, dtype=bool)
    if a_kid.size == 0 or b_kid.size == 0:
        return out
    a = pa.table({"k": a_kid, "s": a_start, "r": np.arange(a_kid.size)})
    b = pa.table({"k": b_kid, "s": b_start})
    hit = a.join(b, keys=["k", "s"], join_type="left semi").column("r").to_numpy()
    out[hit] = True
    return out
