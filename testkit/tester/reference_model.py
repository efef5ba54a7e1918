"""The reference model: Fivetran's documented semantics applied to in-memory tables, independently
of the server (SEMANTICS.md, the schema migration helper guide; where the guide leaves a choice,
the destination's documented choice in the README's "What each call does"). The tester compares
the Delta tables it reads back with this model, so nothing here calls server code.

Rows given to the model are dicts of NORMALISED values (``values.normalize``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Iterable, Optional

from delta_destination.core.model import ACTIVE, DELETED, END, START, SYNCED, Column, DataType as FT, TableSchema
from .values import EPOCH, MAX_TS, ONE_MS, convert_value, migration_value


class ModelError(Exception):
    """The reference model cannot apply an operation (the input or a precondition is wrong)."""


@dataclass
class ModelTable:
    """One table of the model: its schema as Fivetran knows it, and its stored rows by row key."""

    schema: TableSchema
    history: bool
    rows: dict = field(default_factory=dict)  # key tuple -> {column: value}

    @property
    def row_key_columns(self) -> list[str]:
        """Columns that identify a stored row (history tables: key + _fivetran_start)."""
        return self.schema.merge_keys()

    @property
    def business_key(self) -> list[str]:
        """The key of the source's row: without _fivetran_start (one key, many history versions)."""
        return [c for c in self.schema.merge_keys() if c != START]

    def row_key(self, row: dict) -> tuple:
        return tuple(row.get(c) for c in self.row_key_columns)

    def business_key_of(self, row: dict) -> tuple:
        return tuple(row.get(c) for c in self.business_key)


class ReferenceModel:
    """The tables of one run, changed by the same operations the tester sends to the server."""

    def __init__(self):
        self.tables: dict[str, ModelTable] = {}

    # -- DDL -----------------------------------------------------------------
    def create_table(self, schema: TableSchema, history: bool = False) -> None:
        if schema.name in self.tables:
            raise ValueError(f"table {schema.name!r} already exists in the model")
        self.tables[schema.name] = ModelTable(schema, history)

    def alter_table(self, name: str, new_columns: Iterable[Column]) -> None:
        """AlterTable with drop_columns=false: add, change types, set the key."""
        t = self.tables[name]
        new_columns = list(new_columns)
        new_names = {c.name for c in new_columns}
        result: list[Column] = []
        for old in t.schema.columns:
            if old.name not in new_names:
                result.append(old.with_(primary_key=False))  # kept, no longer in the key
        old_by_name = {c.name: c for c in t.schema.columns}
        for c in new_columns:
            old = old_by_name.get(c.name)
            if old is not None and (old.type != c.type or
                                    (c.type == FT.DECIMAL and old.decimal_params() != c.decimal_params())):
                for row in t.rows.values():
                    row[c.name] = convert_value(old, c, row.get(c.name))
            elif old is None:
                for row in t.rows.values():
                    row[c.name] = None
        # keep the order: columns of the request first, then kept ones
        result = new_columns + result
        t.schema = TableSchema(name, tuple(result))
        t.rows = {t.row_key(r): r for r in t.rows.values()}

    # -- live DML ------------------------------------------------------------
    def upsert(self, name: str, rows: Iterable[dict]) -> None:
        t = self.tables[name]
        for r in rows:
            full = {c: r.get(c) for c in t.schema.column_names}
            t.rows[t.row_key(full)] = full

    def update(self, name: str, rows: Iterable[dict]) -> None:
        """Partial rows: only the given columns change; missing rows are ignored."""
        t = self.tables[name]
        for r in rows:
            stored = t.rows.get(t.row_key(r))
            if stored is None:
                continue
            for c, v in r.items():
                if c in stored:
                    stored[c] = v

    def delete(self, name: str, keys: Iterable[dict]) -> None:
        t = self.tables[name]
        for k in keys:
            t.rows.pop(t.row_key(k), None)

    def soft_delete(self, name: str, keys: Iterable[dict], synced: datetime) -> None:
        self.update(name, [{**k, DELETED: True, SYNCED: synced} for k in keys])

    def truncate(self, name: str, cut: datetime, soft_column: Optional[str] = None) -> None:
        t = self.tables.get(name)
        if t is None:
            return  # a missing table is not an error
        for key, row in list(t.rows.items()):
            synced = row.get(SYNCED)
            if synced is not None and synced < cut:
                if soft_column:
                    row[soft_column] = True
                else:
                    del t.rows[key]

    # -- history DML (WriteHistoryBatch, files in the documented order) -------
    def history_earliest_start(self, name: str, rows: Iterable[dict]) -> None:
        t = self.tables[name]
        for r in rows:
            bk = t.business_key_of(r)
            start = r[START]
            for key, row in list(t.rows.items()):
                if t.business_key_of(row) != bk:
                    continue
                if row[START] >= start:
                    del t.rows[key]
            for row in t.rows.values():
                if t.business_key_of(row) == bk and row.get(ACTIVE):
                    row[ACTIVE] = False
                    row[END] = start - ONE_MS

    def history_update(self, name: str, rows: Iterable[dict]) -> None:
        """New versions; unmodified columns come from the version of the key that was active
        before the batch (the one the earliest-start step closed: the latest version starting
        before the batch's earliest start of the key), for every version of the batch (the SDK
        guide); a key with no such version continues from the previous version of the batch."""
        t = self.tables[name]
        rows = list(rows)
        eff: dict = {}
        for r in rows:
            bk = t.business_key_of(r)
            eff[bk] = min(eff.get(bk, r[START]), r[START])
        for r in rows:
            bk = t.business_key_of(r)
            previous = [row for row in t.rows.values() if t.business_key_of(row) == bk]
            if not previous:
                continue  # update of a key that does not exist: ignored
            before = [row for row in previous if row[START] < eff[bk]]
            base = max(before or previous, key=lambda row: row[START])
            new = dict(base)
            new.update(r)
            t.rows[t.row_key(new)] = new

    def history_replace(self, name: str, rows: Iterable[dict]) -> None:
        self.upsert(name, rows)

    def history_delete(self, name: str, rows: Iterable[dict]) -> None:
        t = self.tables[name]
        for r in rows:
            bk = t.business_key_of(r)
            for row in t.rows.values():
                if t.business_key_of(row) == bk and row.get(ACTIVE):
                    row[ACTIVE] = False
                    row[END] = r[END]

    # -- schema migrations (Migrate, and the tester's AlterTable DDL) -------------------
    # Semantics: Fivetran's schema migration helper guide + SEMANTICS.md; where the guide
    # leaves a choice, the destination's documented choice (README "What each call does")
    # is modelled here -- computed on the model's own rows, never by calling server code.

    def _table(self, name: str) -> ModelTable:
        t = self.tables.get(name)
        if t is None:
            raise ModelError(f"table {name!r} does not exist")
        return t

    def _column(self, t: ModelTable, name: str) -> Column:
        c = t.schema.get(name)
        if c is None:
            raise ModelError(f"column {name!r} does not exist in {t.schema.name!r}")
        return c

    @staticmethod
    def _rekey(t: ModelTable) -> None:
        t.rows = {t.row_key(r): r for r in t.rows.values()}

    def alter_table_drop(self, name: str, new_columns: Iterable[Column]) -> None:
        """AlterTable with drop_columns=true: the table becomes exactly the request's columns
        (absent ones dropped with their values, types changed, the key set)."""
        t = self._table(name)
        new_columns = list(new_columns)
        keep = {c.name for c in new_columns}
        self.alter_table(name, new_columns)
        t.schema = TableSchema(name, tuple(c for c in t.schema.columns if c.name in keep))
        for r in t.rows.values():
            for c in list(r):
                if c not in keep:
                    del r[c]
        self._rekey(t)

    def drop_table(self, name: str) -> None:
        """DROP_TABLE; a missing table is nothing to do."""
        self.tables.pop(name, None)

    def rename_table(self, old: str, new: str) -> None:
        t = self._table(old)
        if new in self.tables:
            raise ModelError(f"rename_table: {new!r} already exists")
        del self.tables[old]
        t.schema = TableSchema(new, t.schema.columns)
        self.tables[new] = t

    def copy_table(self, src: str, dst: str) -> None:
        """COPY_TABLE: same columns (and key), a copy of every row."""
        t = self._table(src)
        if dst in self.tables:
            raise ModelError(f"copy_table: {dst!r} already exists")
        self.tables[dst] = ModelTable(TableSchema(dst, t.schema.columns), t.history,
                                      {k: dict(r) for k, r in t.rows.items()})

    def rename_column(self, name: str, old: str, new: str) -> None:
        t = self._table(name)
        self._column(t, old)  # must exist
        if t.schema.has(new):
            raise ModelError(f"rename_column: {new!r} already exists")
        t.schema = TableSchema(name, tuple(c.with_(name=new) if c.name == old else c for c in t.schema.columns))
        t.rows = {k: {(new if c == old else c): v for c, v in r.items()} for k, r in t.rows.items()}

    def copy_column(self, name: str, src: str, dst: str) -> None:
        """COPY_COLUMN: a new column of the source's type (never in the key) holding its values;
        an existing target of the same type gets the values copied."""
        t = self._table(name)
        col = self._column(t, src)
        if src == dst:
            return
        if not t.schema.has(dst):
            t.schema = TableSchema(name, t.schema.columns + (col.with_(name=dst, primary_key=False),))
        for r in t.rows.values():
            r[dst] = r.get(src)

    def update_column_value(self, name: str, column: str, text: Optional[str]) -> None:
        """UPDATE_COLUMN_VALUE: every row (every version of a history table) gets the value."""
        t = self._table(name)
        col = self._column(t, column)
        value = migration_value(col, text)
        for r in t.rows.values():
            r[column] = value

    def add_column_with_default(self, name: str, column: Column, text: Optional[str]) -> None:
        """ADD_COLUMN_WITH_DEFAULT_VALUE: the column is added (never in the key) and every row
        gets the default; an existing column keeps its type and still gets it on every row."""
        t = self._table(name)
        existing = t.schema.get(column.name)
        if existing is None:
            t.schema = TableSchema(name, t.schema.columns + (column.with_(primary_key=False),))
            existing = column
        value = migration_value(existing, text)
        for r in t.rows.values():
            r[column.name] = value

    def history_column_change(self, name: str, column: str, value: Any, ts: datetime, adding: bool) -> None:
        """The history record of a column change at ``ts`` (ADD/DROP_COLUMN_IN_HISTORY_MODE):
        - an active version that started before ts and whose value differs is closed
          (active = false, end = ts - 1 ms) and a copy of it starting at ts, active until the
          maximum timestamp, gets the value (its _fivetran_synced is kept) -- unless that key
          already has a version starting at ts;
        - a version starting exactly at ts gets the value in place (so several migrations with
          the same timestamp record history once);
        - an active version starting after ts makes the whole change refused (the guide's
          validation; the destination answers INVALID_ARGUMENT);
        - historical versions are not touched.
        All conditions are evaluated on the table as it was before the change."""
        t = self._table(name)
        if not t.history:
            raise ModelError(f"{name!r} is not in history mode")
        before = [dict(r) for r in t.rows.values()]
        if any(r[ACTIVE] and r[START] > ts for r in before):
            # the migration guide requires max(_fivetran_start) of active rows <= the timestamp
            raise ModelError(f"{name!r}: active versions start after the operation timestamp (refused)")
        taken = {t.business_key_of(r) for r in before if r[START] == ts}
        out: dict = {}
        for r in before:
            differs = r.get(column) != value
            if r[ACTIVE] and r[START] < ts and differs:
                closed = {**r, ACTIVE: False, END: ts - ONE_MS}
                out[t.row_key(closed)] = closed
                if t.business_key_of(r) not in taken:
                    new = {**r, column: value, START: ts, END: MAX_TS, ACTIVE: True}
                    out[t.row_key(new)] = new
                continue
            in_place = r[START] == ts or (r[ACTIVE] and r[START] > ts and (not adding or r.get(column) is None))
            row = {**r, column: value} if in_place and differs else r
            out.setdefault(t.row_key(row), row)
        t.rows = out

    def add_column_in_history_mode(self, name: str, column: Column, text: Optional[str], ts: datetime) -> None:
        t = self._table(name)
        existing = t.schema.get(column.name)
        if existing is None:
            t.schema = TableSchema(name, t.schema.columns + (column.with_(primary_key=False),))
            for r in t.rows.values():
                r[column.name] = None  # historical versions have no value
            existing = column
        self.history_column_change(name, existing.name, migration_value(existing, text), ts, adding=True)

    def drop_column_in_history_mode(self, name: str, column: str, ts: datetime) -> None:
        """The column stays (history keeps its old values); versions from ts on hold NULL."""
        t = self._table(name)
        if not t.schema.has(column):
            return
        self.history_column_change(name, column, None, ts, adding=False)

    @staticmethod
    def _to_history(t: ModelTable, soft: Optional[str], now: Optional[datetime] = None) -> tuple[TableSchema, dict]:
        """SOFT_DELETE_TO_HISTORY on a copy of ``t``: rows not soft-deleted start at the table's
        latest _fivetran_synced, end at the maximum timestamp, active; soft-deleted rows start =
        end = 1970-01-01, inactive. _fivetran_start joins the key; _fivetran_deleted is dropped
        (another soft-delete column is source data and stays)."""
        soft_col = t.schema.get(soft) if soft else None
        drop_soft = soft_col is not None and soft_col.name == DELETED
        kept = tuple(c for c in t.schema.columns if not (drop_soft and c.name == DELETED))
        schema = TableSchema(t.schema.name, kept + (Column(START, FT.UTC_DATETIME, primary_key=True),
                                                    Column(END, FT.UTC_DATETIME), Column(ACTIVE, FT.BOOLEAN)))
        synced = [r[SYNCED] for r in t.rows.values() if r.get(SYNCED) is not None]
        start = max(synced) if synced else now
        rows = {}
        for r in t.rows.values():
            deleted = soft_col is not None and bool(r.get(soft_col.name))
            if not deleted and start is None:
                raise ModelError("the version start would be the server's clock (no _fivetran_synced): "
                                 "not predictable by the model")
            new = {c.name: r.get(c.name) for c in kept}
            new.update({START: EPOCH, END: EPOCH, ACTIVE: False} if deleted else
                       {START: start, END: MAX_TS, ACTIVE: True})
            rows[tuple(new.get(c) for c in schema.merge_keys())] = new
        return schema, rows

    def soft_delete_to_history(self, name: str, soft: Optional[str]) -> None:
        t = self._table(name)
        if t.history:
            raise ModelError(f"{name!r} is already in history mode")
        t.schema, t.rows = self._to_history(t, soft)
        t.history = True

    def copy_table_to_history_mode(self, src: str, dst: str, soft: Optional[str]) -> None:
        t = self._table(src)
        if dst in self.tables:
            raise ModelError(f"copy_table_to_history_mode: {dst!r} already exists")
        if t.history:
            raise ModelError(f"{src!r} is already in history mode")
        if not soft:
            raise ModelError("copy_table_to_history_mode without a soft-deleted column is LIVE_TO_HISTORY, whose "
                             "start is the server's clock: not predictable by the model")
        schema, rows = self._to_history(t, soft)
        self.tables[dst] = ModelTable(TableSchema(dst, schema.columns), True, rows)

    def history_to_soft_delete(self, name: str, soft: Optional[str], keep_deleted_rows: Optional[bool] = None) -> None:
        """HISTORY_TO_SOFT_DELETE: each key keeps only its latest version (greatest
        _fivetran_start); the soft-delete column (added as BOOLEAN if missing) := NOT
        _fivetran_active (NULL active counts as not deleted); the history columns go and
        _fivetran_start leaves the key. keep_deleted_rows=false (only when given) removes
        the keys whose latest version is inactive."""
        t = self._table(name)
        if not t.history:
            raise ModelError(f"{name!r} is not in history mode")
        soft = soft or DELETED
        latest: dict = {}
        for r in t.rows.values():
            k = t.business_key_of(r)
            if k not in latest or r[START] > latest[k][START]:
                latest[k] = r
        cols = [c for c in t.schema.columns if c.name not in (START, END, ACTIVE)]
        if not any(c.name == soft for c in cols):
            cols.append(Column(soft, FT.BOOLEAN))
        t.schema = TableSchema(name, tuple(cols))
        t.history = False
        rows = []
        for r in latest.values():
            if keep_deleted_rows is False and r.get(ACTIVE) is not True:
                continue
            new = {c.name: r.get(c.name) for c in cols}
            new[soft] = r.get(ACTIVE) is False
            rows.append(new)
        t.rows = {t.row_key(r): r for r in rows}

    # -- results -------------------------------------------------------------
    def expected_rows(self, name: str) -> list[dict]:
        t = self.tables[name]
        return [dict(r) for r in t.rows.values()]

