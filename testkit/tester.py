#!/usr/bin/env python
"""A client that drives the destination the way Fivetran's destination tester does.

It reads one tester input file (the JSON format of Fivetran's destination tester,
see ../shared/fivetran-sdk-v2/SEMANTICS.md "The tester's input format"), and:

1. builds every table of ``create_table`` with Fivetran's system columns and calls
   CreateTable, then AlterTable for every ``alter_table`` entry;
2. runs ``ops`` in order, writing batch files exactly like Fivetran (each file
   encrypted with its own AES key unless plain text, compressed, random NULL /
   unmodified markers per request, CSV header in a shuffled column order) and
   calling WriteBatch / WriteHistoryBatch / Truncate;
3. (with ``run_migrations``) runs the ``schema_migration`` steps in the order the file
   lists them, see ``MIGRATIONS``: add_column / change_column_data_type / drop_column are
   AlterTable calls (drop_column with drop_columns=true), every other op one Migrate call;
   the model applies the same migration on its own rows;
4. calls DescribeTable for ``describe_table`` and compares with the expected schema
   (after migrations also for every table the model holds, and not_found for the tables a
   migration dropped or renamed away);
5. reads every table back from disk with ``deltalake`` and compares it row by row
   with an in-memory REFERENCE MODEL that applies the documented semantics
   independently of the server (after migrations: every table that exists at the end,
   copies and renames included).

Library use (tests)::

    result = run_input_file(stub, warehouse, path, schema, live_only=True,
                            compression=Compression.ZSTD, plain_text=False)
    assert result.ok, "\\n".join(result.problems)

CLI::

    python scripts/tester_client.py --port 50052 --input FILE [--schema tester]
        [--warehouse ./warehouse] [--plain-text] [--compression zstd|gzip|off] [--live-only]

Choices where the tester format is not explicit (all documented in the report):

* Several rows with the same key in one op of a live table: Fivetran deduplicates
  within a batch. Upserts and deletes keep the LAST occurrence; updates are merged
  in order (later values win, columns given by any of them are set), which is the
  state applying them one after the other would give.
* ``op_time`` is the change time for history mode; for live tables it is dropped.
* Tables without a primary key get ``_fivetran_id`` as key; rows that do not give
  one get a deterministic hash of their content (as Fivetran does).
* Replace (upsert) files carry every column of the table; columns a row does not
  give are NULL (an upsert replaces the whole row).
* Update files carry every column; columns not given are the unmodified marker.
  ``_fivetran_synced`` is set, ``_fivetran_deleted`` is left unmodified.
* Delete files carry every column; non-key columns are NULL except
  ``_fivetran_synced``. The model removes the row (the stored synced is irrelevant).
* Soft deletes are update files with ``_fivetran_deleted`` = true and
  ``_fivetran_synced`` set, every other column unmodified.
* AlterTable: the new primary key is exactly the request's; columns absent from the
  request are kept (drop_columns=false) and are no longer part of the key.
* History mode (``live_only=False``): upserts/updates send earliest_start_files;
  deletes (and soft deletes, since a history table has no ``_fivetran_deleted``)
  send delete files with key + ``_fivetran_end`` = op_time - 1 ms; a soft truncate
  of a history table is sent as a hard truncate.
* Migrations: MigrationDetails.table is the entry's ``table`` (``from_table`` for table
  copies/renames); ``deleted_column`` becomes ``soft_deleted_column``; a JSON null value is
  sent as "NULL"; set_column_to_null is update_column_value with "NULL". With ``live_only``
  the history-only ops (add/drop_column_in_history_mode, migrate_history_to_soft_delete)
  on a table that is live only because of ``live_only`` are skipped (a note says so).
  The model's semantics for each op are at ``ReferenceModel`` "schema migrations".
"""
from __future__ import annotations

import argparse
import base64
import copy
import hashlib
import json
import random
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta, timezone
from decimal import ROUND_HALF_UP, Decimal, localcontext
from pathlib import Path
from typing import Any, Callable, Iterable, Optional

import numpy as np

from delta_destination.core.model import (
    ACTIVE,
    DELETED,
    END,
    FIVETRAN_ID,
    START,
    SYNCED,
    Column,
    DataType as FT,
    TableSchema,
)

MAX_TS = datetime(9999, 12, 31, 23, 59, 59, 999000, tzinfo=timezone.utc)
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)  # the guide's minTimestamp
ONE_MS = timedelta(milliseconds=1)
OP_TIME = "op_time"
RPC_TIMEOUT = 600.0

# ---------------------------------------------------------------------------
# Values: normalisation (JSON / disk value -> canonical Python value)
# ---------------------------------------------------------------------------

_TEXT_TYPES = (FT.STRING, FT.JSON, FT.XML, FT.NAIVE_TIME, FT.UNSPECIFIED)


def _parse_utc(value) -> datetime:
    if isinstance(value, datetime):
        dt = value
    else:
        s = str(value).strip()
        if s.endswith("Z") or s.endswith("z"):
            s = s[:-1] + "+00:00"
        dt = datetime.fromisoformat(s.replace(" ", "T", 1))
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return dt.astimezone(timezone.utc)


def _decimal_quantum(scale: int) -> Decimal:
    return Decimal(1).scaleb(-scale)


def normalize(col: Column, value: Any) -> Any:
    """Canonical Python value for a column: what the model stores and what a
    Delta read-back is converted to before comparing."""
    if value is None:
        return None
    t = FT(col.type)
    if t == FT.BOOLEAN:
        if isinstance(value, str):
            low = value.strip().lower()
            if low not in ("true", "false"):
                raise ValueError(f"not a boolean: {value!r}")
            return low == "true"
        return bool(value)
    if t in (FT.SHORT, FT.INT, FT.LONG):
        if isinstance(value, bool):
            return int(value)
        if isinstance(value, (float, Decimal)):
            if value != int(value):
                raise ValueError(f"not an integer: {value!r}")
            return int(value)
        return int(value)
    if t == FT.DECIMAL:
        _p, s = col.decimal_params()
        d = value if isinstance(value, Decimal) else Decimal(str(value))
        with localcontext() as ctx:
            ctx.prec = 100
            return d.quantize(_decimal_quantum(s), rounding=ROUND_HALF_UP)
    if t == FT.FLOAT:
        return float(np.float32(float(value)))
    if t == FT.DOUBLE:
        return float(value)
    if t == FT.NAIVE_DATE:
        if isinstance(value, datetime):
            return value.date()
        if isinstance(value, date):
            return value
        return date.fromisoformat(str(value).strip()[:10])
    if t == FT.NAIVE_DATETIME:
        if isinstance(value, datetime):
            dt = value
        else:
            dt = datetime.fromisoformat(str(value).strip().rstrip("Zz").replace(" ", "T", 1))
        if dt.tzinfo is not None:
            dt = dt.astimezone(timezone.utc).replace(tzinfo=None)
        return dt
    if t == FT.UTC_DATETIME:
        return _parse_utc(value)
    if t == FT.BINARY:
        if isinstance(value, (bytes, bytearray, memoryview)):
            return bytes(value)
        # The tester's convention: a JSON string is the binary value's UTF-8 bytes.
        return str(value).encode("utf-8")
    if t == FT.NAIVE_TIME and isinstance(value, time):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def value_text(col: Column, value: Any) -> str:
    """Fivetran's text form of a normalised value (used for type conversions)."""
    t = FT(col.type)
    if t == FT.BOOLEAN:
        return "true" if value else "false"
    if t == FT.DECIMAL:
        return format(value, "f")
    if t in (FT.FLOAT, FT.DOUBLE):
        return repr(float(value))
    if t == FT.UTC_DATETIME:
        return format_utc(value)
    if t in (FT.NAIVE_DATE, FT.NAIVE_DATETIME):
        return value.isoformat()
    if t == FT.BINARY:
        return base64.b64encode(value).decode("ascii")
    return str(value)


def convert_value(old: Column, new: Column, value: Any) -> Any:
    """A stored value after AlterTable changes its column's type."""
    if value is None:
        return None
    if FT(old.type) == FT(new.type) and FT(new.type) != FT.DECIMAL:
        return value
    if FT(new.type) in _TEXT_TYPES:
        if FT(old.type) == FT.BINARY:
            return value.decode("utf-8", errors="replace")
        return value_text(old, value)
    if FT(old.type) == FT.BINARY and FT(new.type) != FT.BINARY:
        raise ValueError(f"cannot convert BINARY column {old.name!r} to {FT(new.type).name}")
    if FT(old.type) in (FT.FLOAT, FT.DOUBLE) and FT(new.type) == FT.DECIMAL:
        return normalize(new, Decimal(repr(float(value))))
    return normalize(new, value)


def migration_value(col: Column, text: Optional[str]) -> Any:
    """A Migrate value (text) for a column. "NULL" is SQL NULL (the guide: "NULL can also be
    expected as a valid value"); so is an empty value (proto3 cannot tell it from unset, the
    destination's documented choice). Other text is read like a batch-file cell (BINARY as
    base64, like the batch files)."""
    if text is None or text == "" or text == "NULL":
        return None
    if FT(col.type) == FT.BINARY:
        return base64.b64decode(text, validate=True)
    return normalize(col, text)


class ModelError(Exception):
    """The reference model cannot apply an operation (the input or a precondition is wrong)."""


def format_utc(dt: datetime) -> str:
    dt = dt.astimezone(timezone.utc)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{dt.microsecond // 1000:03d}Z"


def sort_key(value: Any):
    """Total order over mixed normalised values (for stable printing)."""
    if value is None:
        return (0, "")
    return (1, type(value).__name__, value if not isinstance(value, bool) else int(value))


# ---------------------------------------------------------------------------
# Table schemas from the tester format
# ---------------------------------------------------------------------------


def column_from_spec(name: str, spec: Any, primary_key: bool) -> Column:
    if isinstance(spec, str):
        return Column(name, FT[spec.strip().upper()], primary_key=primary_key)
    if isinstance(spec, dict):
        t = FT[str(spec["type"]).strip().upper()]
        if t == FT.DECIMAL:
            return Column(name, t, primary_key=primary_key, precision=int(spec.get("precision", 38)),
                          scale=int(spec.get("scale", 0)))
        return Column(name, t, primary_key=primary_key,
                      string_byte_length=spec.get("string_byte_length"))
    raise ValueError(f"column {name!r}: unknown type spec {spec!r}")


def build_table(name: str, spec: dict, *, history: bool) -> TableSchema:
    """The table as Fivetran creates it: the tester's columns plus system columns."""
    pks = list(spec.get("primary_key") or [])
    cols_spec = spec.get("columns") or {}
    for pk in pks:
        if pk not in cols_spec:
            raise ValueError(f"table {name!r}: primary key {pk!r} is not a column")
    columns = [column_from_spec(n, s, n in pks) for n, s in cols_spec.items()]
    if not pks:
        columns.append(Column(FIVETRAN_ID, FT.STRING, primary_key=True))
    if history:
        columns.append(Column(START, FT.UTC_DATETIME, primary_key=True))
        columns.append(Column(END, FT.UTC_DATETIME))
        columns.append(Column(ACTIVE, FT.BOOLEAN))
    else:
        columns.append(Column(DELETED, FT.BOOLEAN))
    columns.append(Column(SYNCED, FT.UTC_DATETIME))
    return TableSchema(name, tuple(columns))


def key_columns(schema: TableSchema, history: bool) -> list[str]:
    """Business key of a row (without _fivetran_start)."""
    keys = [c for c in schema.merge_keys() if c != START]
    return keys


def table_to_proto(schema: TableSchema):
    from delta_destination.fivetran._proto import common_pb2

    cols = []
    for c in schema.columns:
        pc = common_pb2.Column(name=c.name, type=int(c.type), primary_key=c.primary_key)
        if c.type == FT.DECIMAL:
            p, s = c.decimal_params()
            pc.params.decimal.precision = p
            pc.params.decimal.scale = s
        elif c.string_byte_length:
            pc.params.string_byte_length = int(c.string_byte_length)
        cols.append(pc)
    return common_pb2.Table(name=schema.name, columns=cols)


def column_from_proto(pc) -> Column:
    precision = scale = None
    sbl = None
    if pc.HasField("params"):
        which = pc.params.WhichOneof("params")
        if which == "decimal":
            precision, scale = pc.params.decimal.precision, pc.params.decimal.scale
        elif which == "string_byte_length":
            sbl = pc.params.string_byte_length
    return Column(pc.name, FT(pc.type), primary_key=pc.primary_key, precision=precision, scale=scale,
                  string_byte_length=sbl)


# ---------------------------------------------------------------------------
# The reference model
# ---------------------------------------------------------------------------


@dataclass
class ModelTable:
    schema: TableSchema
    history: bool
    rows: dict = field(default_factory=dict)  # key tuple -> {column: value}

    @property
    def row_key_columns(self) -> list[str]:
        """Columns that identify a stored row (history tables: key + _fivetran_start)."""
        return self.schema.merge_keys()

    @property
    def business_key(self) -> list[str]:
        return key_columns(self.schema, self.history)

    def row_key(self, row: dict) -> tuple:
        return tuple(row.get(c) for c in self.row_key_columns)

    def bkey(self, row: dict) -> tuple:
        return tuple(row.get(c) for c in self.business_key)


class ReferenceModel:
    """Applies SEMANTICS.md to in-memory tables, independently of the server.

    Rows given to the model are dicts of NORMALISED values (see ``normalize``).
    """

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
            bk = t.bkey(r)
            start = r[START]
            for key, row in list(t.rows.items()):
                if t.bkey(row) != bk:
                    continue
                if row[START] >= start:
                    del t.rows[key]
            for row in t.rows.values():
                if t.bkey(row) == bk and row.get(ACTIVE):
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
            bk = t.bkey(r)
            eff[bk] = min(eff.get(bk, r[START]), r[START])
        for r in rows:
            bk = t.bkey(r)
            previous = [row for row in t.rows.values() if t.bkey(row) == bk]
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
            bk = t.bkey(r)
            for row in t.rows.values():
                if t.bkey(row) == bk and row.get(ACTIVE):
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
        taken = {t.bkey(r) for r in before if r[START] == ts}
        out: dict = {}
        for r in before:
            differs = r.get(column) != value
            if r[ACTIVE] and r[START] < ts and differs:
                closed = {**r, ACTIVE: False, END: ts - ONE_MS}
                out[t.row_key(closed)] = closed
                if t.bkey(r) not in taken:
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
            k = t.bkey(r)
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


# ---------------------------------------------------------------------------
# Comparison helpers
# ---------------------------------------------------------------------------


def compare_schema(expected: TableSchema, actual_columns: list[Column]) -> list[str]:
    problems = []
    act = {c.name: c for c in actual_columns}
    exp = {c.name: c for c in expected.columns}
    for n, e in exp.items():
        a = act.get(n)
        if a is None:
            problems.append(f"column {n!r} missing (expected {_type_str(e)})")
            continue
        if FT(a.type) != FT(e.type):
            problems.append(f"column {n!r}: type {_type_str(a)}, expected {_type_str(e)}")
        elif e.type == FT.DECIMAL:
            if a.precision is None:
                problems.append(f"column {n!r}: DECIMAL without params, expected {_type_str(e)}")
            elif (a.precision, a.scale) != e.decimal_params():
                problems.append(f"column {n!r}: {_type_str(a)}, expected {_type_str(e)}")
        if bool(a.primary_key) != bool(e.primary_key):
            problems.append(f"column {n!r}: primary_key={a.primary_key}, expected {e.primary_key}")
    for n in act:
        if n not in exp:
            problems.append(f"unexpected column {n!r} ({_type_str(act[n])})")
    return problems


def _type_str(c: Column) -> str:
    if c.type == FT.DECIMAL and c.precision is not None:
        return f"DECIMAL({c.precision},{c.scale})"
    return FT(c.type).name


def _arrow_equivalent(a, b) -> bool:
    import pyarrow as pa

    def canon(t):
        if pa.types.is_large_string(t) or getattr(pa.types, "is_string_view", lambda _: False)(t):
            return pa.string()
        if pa.types.is_large_binary(t) or getattr(pa.types, "is_binary_view", lambda _: False)(t):
            return pa.binary()
        return t

    return canon(a) == canon(b)


def _show_row(row: dict, columns: list[str]) -> str:
    return "{" + ", ".join(f"{c}={row.get(c)!r}" for c in columns) + "}"


def compare_rows(t: ModelTable, disk_rows: list[dict]) -> list[str]:
    """Row-by-row comparison of the model with what was read back."""
    problems = []
    cols = t.schema.column_names
    exp_tuples = {tuple(r.get(c) for c in cols) for r in t.rows.values()}
    act_tuples = [tuple(r.get(c) for c in cols) for r in disk_rows]
    if exp_tuples == set(act_tuples) and len(act_tuples) == len(exp_tuples):
        return problems
    key_cols = t.row_key_columns
    disk_by_key: dict[tuple, list[dict]] = {}
    for r in disk_rows:
        disk_by_key.setdefault(tuple(r.get(c) for c in key_cols), []).append(r)
    for k, rs in sorted(disk_by_key.items(), key=lambda kv: [sort_key(v) for v in kv[0]]):
        if len(rs) > 1:
            problems.append(f"duplicate key {dict(zip(key_cols, k))}: {len(rs)} rows on disk")
    for k, exp in sorted(t.rows.items(), key=lambda kv: [sort_key(v) for v in kv[0]]):
        got = disk_by_key.get(k)
        if not got:
            problems.append(f"missing row {_show_row(exp, cols)}")
            continue
        diffs = [f"{c}: got {got[0].get(c)!r}, expected {exp.get(c)!r}" for c in cols if got[0].get(c) != exp.get(c)]
        if diffs:
            problems.append(f"row {dict(zip(key_cols, k))} differs: " + "; ".join(diffs))
    for k, rs in sorted(disk_by_key.items(), key=lambda kv: [sort_key(v) for v in kv[0]]):
        if k not in t.rows:
            problems.append(f"extra row {_show_row(rs[0], cols)}")
    if not problems:
        problems.append("row multisets differ (no per-key difference found)")
    return problems


def table_path(warehouse, schema: str, table: str) -> str:
    """Where the destination keeps a table (its warehouse layout spells names as directories)."""
    from delta_destination.warehouse import Warehouse, normalise_root

    return Warehouse(normalise_root(str(warehouse))).table_location(schema, table)


def read_back(warehouse: str, schema: str, t: ModelTable) -> tuple[list[dict], list[str]]:
    """Read a table from disk (independently of Spark) and normalise its values."""
    from testkit.delta_read import read_delta_table
    from delta_destination.core.types import arrow_type

    path = table_path(warehouse, schema, t.schema.name)
    problems: list[str] = []
    try:
        arrow = read_delta_table(path)
    except Exception as e:  # noqa: BLE001
        return [], [f"cannot read Delta table at {path}: {type(e).__name__}: {e}"]
    fields = {f.name: f for f in arrow.schema}
    for c in t.schema.columns:
        f = fields.get(c.name)
        if f is None:
            problems.append(f"column {c.name!r} missing on disk")
        elif not _arrow_equivalent(f.type, arrow_type(c)):
            problems.append(f"column {c.name!r} stored as {f.type}, expected {arrow_type(c)}")
    for n in fields:
        if not t.schema.has(n):
            problems.append(f"unexpected column {n!r} on disk")
    rows = []
    for raw in arrow.to_pylist():
        row = {}
        for c in t.schema.columns:
            v = raw.get(c.name)
            try:
                row[c.name] = normalize(c, v)
            except Exception as e:  # noqa: BLE001
                problems.append(f"column {c.name!r}: cannot read back value {v!r}: {e}")
                row[c.name] = v
        rows.append(row)
    return rows, problems


# ---------------------------------------------------------------------------
# The run
# ---------------------------------------------------------------------------


@dataclass
class RunResult:
    ok: bool
    problems: list[str]
    tables: dict  # table name -> {"columns": [...], "rows": [row dicts read back, sorted]}
    notes: list[str] = field(default_factory=list)


class Clock:
    """Monotonic `_fivetran_synced` values, ms precision, one step per op."""

    def __init__(self, start: Optional[datetime] = None):
        if start is None:
            start = datetime.now(timezone.utc)
        start = start.astimezone(timezone.utc)
        self.current = start.replace(microsecond=(start.microsecond // 1000) * 1000)

    def next_op(self) -> datetime:
        self.current = self.current + timedelta(seconds=1, milliseconds=1)
        return self.current

    def cut(self) -> datetime:
        """A truncate cut just (1 ms) after every value handed out so far."""
        self.current = self.current + ONE_MS
        return self.current


class TesterRun:
    def __init__(self, stub, warehouse, spec: dict, schema: str, *, live_only: bool = False,
                 compression=None, plain_text: bool = False, file_format=None, seed: int = 0,
                 start_time: Optional[datetime] = None, run_migrations: bool = False,
                 configuration: Optional[dict] = None, log: Optional[Callable[[str], None]] = None):
        from delta_destination.fivetran.batch_files import Compression, FileFormat

        self.stub = stub
        self.warehouse = str(warehouse)
        self.spec = spec
        self.schema = schema
        self.live_only = live_only
        self.compression = Compression.ZSTD if compression is None else compression
        self.plain_text = plain_text
        self.file_format = FileFormat.CSV if file_format is None else FileFormat(file_format)
        if self.file_format == FileFormat.PARQUET:
            self.compression = Compression.OFF  # Parquet batch files get no extra compression
        self.rng = random.Random(seed)
        self.clock = Clock(start_time)
        self.run_migrations = run_migrations
        self.configuration = dict(configuration or {})
        self.log = log or (lambda msg: None)
        self.model = ReferenceModel()
        self.problems: list[str] = []
        self.notes: list[str] = []
        self.tmpdir: Optional[Path] = None
        self._file_no = 0
        self.migrated = False  # schema_migration steps were run
        self.vanished: set[str] = set()  # tables a migration dropped or renamed away
        self._mig_ctx = "schema_migration"

    # -- plumbing -------------------------------------------------------------
    def problem(self, msg: str) -> None:
        self.problems.append(msg)
        self.log(f"PROBLEM: {msg}")

    def call(self, rpc: str, request, context: str, *, ok_fields=("success",)):
        """Call an RPC; a raised error, a task or a warning is a problem."""
        import grpc

        try:
            resp = getattr(self.stub, rpc)(request, timeout=RPC_TIMEOUT)
        except grpc.RpcError as e:
            code = e.code().name if hasattr(e, "code") and e.code() else "?"
            details = e.details() if hasattr(e, "details") else str(e)
            self.problem(f"{rpc} ({context}) raised {code}: {details}")
            return None
        which = resp.WhichOneof("response")
        if which == "task":
            self.problem(f"{rpc} ({context}) answered task: {resp.task.message}")
        elif which == "warning":
            self.problem(f"{rpc} ({context}) answered warning: {resp.warning.message}")
        elif which not in ok_fields:
            self.problem(f"{rpc} ({context}) answered {which!r}, expected one of {list(ok_fields)}")
        return resp

    def is_history(self, spec: dict) -> bool:
        return bool(spec.get("history_mode")) and not self.live_only

    # -- the whole run ----------------------------------------------------------
    def run(self, handover: Optional[tuple[int, Any]] = None) -> RunResult:
        if not self.check_capabilities():
            return RunResult(ok=False, problems=list(self.problems), tables={}, notes=list(self.notes))
        self.tmpdir = Path(tempfile.mkdtemp(prefix="tester-batch-"))
        try:
            self.create_tables()
            self.alter_tables()
            for i, step in enumerate(self.spec.get("ops") or []):
                if handover is not None and i == handover[0]:
                    self.log(f"ops[{i}]: handing over to the other server")
                    self.stub = handover[1]
                for op_name, payload in step.items():
                    fn = OPS.get(op_name)
                    if fn is None:
                        self.problem(f"ops[{i}]: unknown op {op_name!r}")
                        continue
                    self.log(f"ops[{i}] {op_name}")
                    fn(self, i, payload)
            if handover is not None and self.stub is not handover[1]:
                self.stub = handover[1]
            self.schema_migrations()
            self.describe_tables()
            tables = self.compare_data()
        finally:
            shutil.rmtree(self.tmpdir, ignore_errors=True)
        return RunResult(ok=not self.problems, problems=list(self.problems), tables=tables, notes=list(self.notes))

    def check_capabilities(self) -> bool:
        """Fivetran asks first which batch file format the destination wants."""
        import grpc
        from delta_destination.fivetran._proto import destination_sdk_pb2 as pb
        from delta_destination.fivetran.batch_files import FileFormat

        try:
            resp = self.stub.Capabilities(pb.CapabilitiesRequest(), timeout=RPC_TIMEOUT)
        except grpc.RpcError as e:
            self.problem(f"Capabilities raised {e.code().name if e.code() else '?'}: {e.details()}")
            return False
        announced = FileFormat.PARQUET if resp.batch_file_format == pb.PARQUET else FileFormat.CSV
        self.log(f"Capabilities: batch files as {announced.name}")
        if announced != self.file_format:
            self.problem(f"Capabilities announces {announced.name} batch files, this run writes "
                         f"{self.file_format.name}: start the server with that format or pass file_format")
            return False
        return True

    def create_tables(self) -> None:
        from delta_destination.fivetran._proto import destination_sdk_pb2 as pb

        for name, spec in (self.spec.get("create_table") or {}).items():
            history = self.is_history(spec)
            schema = build_table(name, spec, history=history)
            self.log(f"CreateTable {name} ({len(schema.columns)} columns{', history mode' if history else ''})")
            resp = self.call("CreateTable", pb.CreateTableRequest(
                configuration=self.configuration, schema_name=self.schema, table=table_to_proto(schema)),
                f"create_table {name}")
            if resp is not None:
                self.model.create_table(schema, history)

    def alter_tables(self) -> None:
        from delta_destination.fivetran._proto import destination_sdk_pb2 as pb

        for name, spec in (self.spec.get("alter_table") or {}).items():
            t = self.model.tables.get(name)
            if t is None:
                self.problem(f"alter_table {name}: the table was not created")
                continue
            new = build_table(name, spec, history=t.history)
            self.log(f"AlterTable {name}")
            resp = self.call("AlterTable", pb.AlterTableRequest(
                configuration=self.configuration, schema_name=self.schema, table=table_to_proto(new),
                drop_columns=False), f"alter_table {name}")
            if resp is not None:
                self.model.alter_table(name, new.columns)

    def schema_migrations(self) -> None:
        steps = self.spec.get("schema_migration") or []
        if not steps:
            return
        if not self.run_migrations:
            names = sorted({n for s in steps for n in s})
            note = f"schema_migration skipped (run_migrations=False): {', '.join(names)}"
            self.notes.append(note)
            self.log(note)
            return
        self.migrated = True
        for i, step in enumerate(steps):
            for name, entries in step.items():
                fn = MIGRATIONS.get(name)
                if fn is None:
                    self.problem(f"schema_migration[{i}]: {name!r} is not implemented by the client")
                    continue
                for j, entry in enumerate(entries if isinstance(entries, list) else [entries]):
                    self._mig_ctx = f"schema_migration[{i}] {name}[{j}]"
                    self.log(self._mig_ctx)
                    fn(self, entry)

    def describe_tables(self) -> None:
        """DescribeTable for ``describe_table``; after migrations also for every table the model
        holds and every table a migration removed (expected not_found, and no Delta table left
        at its location)."""
        from delta_destination.fivetran._proto import destination_sdk_pb2 as pb

        names = list(self.spec.get("describe_table") or [])
        if self.migrated:
            names += [n for n in self.model.tables if n not in names]
            names += [n for n in sorted(self.vanished) if n not in names and n not in self.model.tables]
        for name in names:
            resp = self.call("DescribeTable", pb.DescribeTableRequest(
                configuration=self.configuration, schema_name=self.schema, table_name=name),
                f"describe_table {name}", ok_fields=("table", "not_found"))
            if resp is None:
                continue
            which = resp.WhichOneof("response")
            t = self.model.tables.get(name)
            if t is None:
                if which != "not_found":
                    self.problem(f"DescribeTable {name}: expected not_found, got {which}")
                else:
                    self.log(f"DescribeTable {name}: not_found, as expected")
                continue
            if which != "table":
                self.problem(f"DescribeTable {name}: expected the table, got {which}")
                continue
            actual = [column_from_proto(c) for c in resp.table.columns]
            for p in compare_schema(t.schema, actual):
                self.problem(f"DescribeTable {name}: {p}")
            self.log(f"DescribeTable {name}: {len(actual)} columns compared")
        if "://" not in self.warehouse:
            for name in sorted(self.vanished - set(self.model.tables)):
                gone = Path(table_path(self.warehouse, self.schema, name)) / "_delta_log"
                if gone.exists():
                    self.problem(f"table {name}: removed by a migration, but a Delta table is still at {gone.parent}")

    # -- schema migrations ------------------------------------------------------------------
    def _migrate(self, table: str, *, expect=("success",), **operation) -> bool:
        from delta_destination.fivetran._proto import destination_sdk_pb2 as pb

        req = pb.MigrateRequest(configuration=self.configuration,
                                details=pb.MigrationDetails(schema=self.schema, table=table, **operation))
        resp = self.call("Migrate", req, self._mig_ctx, ok_fields=expect)
        return resp is not None and resp.WhichOneof("response") in expect

    def _alter(self, t: ModelTable, columns: list[Column], drop_columns: bool) -> bool:
        from delta_destination.fivetran._proto import destination_sdk_pb2 as pb

        resp = self.call("AlterTable", pb.AlterTableRequest(
            configuration=self.configuration, schema_name=self.schema,
            table=table_to_proto(TableSchema(t.schema.name, tuple(columns))), drop_columns=drop_columns),
            self._mig_ctx)
        return resp is not None and resp.WhichOneof("response") == "success"

    def _model_apply(self, fn, *args) -> None:
        try:
            fn(*args)
        except ModelError as e:
            self.problem(f"{self._mig_ctx}: the reference model cannot apply it: {e}")

    def _mig_table(self, e: dict, key: str = "table") -> Optional[ModelTable]:
        name = e.get(key)
        t = self.model.tables.get(name) if name else None
        if t is None:
            self.problem(f"{self._mig_ctx}: table {name!r} does not exist (in the reference model); not sent")
        return t

    def _history_only(self, t: ModelTable) -> bool:
        """A history-mode operation on a table that is live only because of live_only: skipped."""
        if t.history or not self.live_only:
            return False
        note = (f"{self._mig_ctx}: skipped, {t.schema.name!r} is a live table in this run "
                f"(live_only=True) and the operation needs history mode")
        self.notes.append(note)
        self.log(note)
        return True

    @staticmethod
    def _text(value) -> str:
        """A migration value as the proto's text; JSON null -> "NULL"."""
        if value is None:
            return "NULL"
        if isinstance(value, bool):
            return "true" if value else "false"
        return str(value)

    def _removed(self, name: str) -> None:
        self.vanished.add(name)

    def _appeared(self, name: str) -> None:
        self.vanished.discard(name)

    # DDL: the tester sends these through AlterTable (the helper guide: "adding/dropping
    # columns, changing data types ... are automatically handled by Fivetran through the
    # AlterTable RPC call"), with the table as Fivetran knows it after the change.
    def mig_add_column(self, e: dict) -> None:
        t = self._mig_table(e)
        if t is None:
            return
        new = column_from_spec(e["column"], e["data_type"], False)
        old = t.schema.get(new.name)
        if old is not None:
            cols = [new.with_(primary_key=c.primary_key) if c.name == new.name else c for c in t.schema.columns]
        else:
            cols = list(t.schema.columns) + [new]
        if self._alter(t, cols, drop_columns=False):
            self._model_apply(self.model.alter_table, t.schema.name, cols)

    def mig_change_column_data_type(self, e: dict) -> None:
        t = self._mig_table(e)
        if t is None:
            return
        old = t.schema.get(e["column"])
        if old is None:
            self.problem(f"{self._mig_ctx}: column {e['column']!r} does not exist (in the reference model); not sent")
            return
        new = column_from_spec(old.name, e["data_type"], old.primary_key)
        cols = [new if c.name == old.name else c for c in t.schema.columns]
        if self._alter(t, cols, drop_columns=False):
            self._model_apply(self.model.alter_table, t.schema.name, cols)

    def mig_drop_column(self, e: dict) -> None:
        t = self._mig_table(e)
        if t is None:
            return
        cols = [c for c in t.schema.columns if c.name != e["column"]]
        if self._alter(t, cols, drop_columns=True):
            self._model_apply(self.model.alter_table_drop, t.schema.name, cols)

    # Migrate
    def mig_copy_column(self, e: dict) -> None:
        from delta_destination.fivetran._proto import destination_sdk_pb2 as pb

        t = self._mig_table(e)
        if t is not None and self._migrate(t.schema.name, copy=pb.CopyOperation(
                copy_column=pb.CopyColumn(from_column=e["from_column"], to_column=e["to_column"]))):
            self._model_apply(self.model.copy_column, t.schema.name, e["from_column"], e["to_column"])

    def mig_update_column_value(self, e: dict, value=None) -> None:
        from delta_destination.fivetran._proto import destination_sdk_pb2 as pb

        text = self._text(e.get("value") if value is None else value)
        t = self._mig_table(e)
        if t is not None and self._migrate(t.schema.name, update_column_value=pb.UpdateColumnValueOperation(
                column=e["column"], value=text)):
            self._model_apply(self.model.update_column_value, t.schema.name, e["column"], text)

    def mig_set_column_to_null(self, e: dict) -> None:
        self.mig_update_column_value(e, value="NULL")

    def mig_add_column_with_default_value(self, e: dict) -> None:
        from delta_destination.fivetran._proto import destination_sdk_pb2 as pb

        t = self._mig_table(e)
        if t is None:
            return
        new = column_from_spec(e["column"], e["data_type"], False)
        text = self._text(e.get("default_value"))
        if self._migrate(t.schema.name, add=pb.AddOperation(add_column_with_default_value=pb.AddColumnWithDefaultValue(
                column=new.name, column_type=int(new.type), default_value=text))):
            self._model_apply(self.model.add_column_with_default, t.schema.name, Column(new.name, new.type), text)

    def mig_copy_table(self, e: dict) -> None:
        from delta_destination.fivetran._proto import destination_sdk_pb2 as pb

        t = self._mig_table(e, "from_table")
        if t is not None and self._migrate(e.get("table") or e["from_table"], copy=pb.CopyOperation(
                copy_table=pb.CopyTable(from_table=e["from_table"], to_table=e["to_table"]))):
            self._model_apply(self.model.copy_table, e["from_table"], e["to_table"])
            self._appeared(e["to_table"])

    def mig_rename_column(self, e: dict) -> None:
        from delta_destination.fivetran._proto import destination_sdk_pb2 as pb

        t = self._mig_table(e)
        if t is not None and self._migrate(t.schema.name, rename=pb.RenameOperation(
                rename_column=pb.RenameColumn(from_column=e["from_column"], to_column=e["to_column"]))):
            self._model_apply(self.model.rename_column, t.schema.name, e["from_column"], e["to_column"])

    def mig_rename_table(self, e: dict) -> None:
        from delta_destination.fivetran._proto import destination_sdk_pb2 as pb

        t = self._mig_table(e, "from_table")
        if t is not None and self._migrate(e.get("table") or e["from_table"], rename=pb.RenameOperation(
                rename_table=pb.RenameTable(from_table=e["from_table"], to_table=e["to_table"]))):
            self._model_apply(self.model.rename_table, e["from_table"], e["to_table"])
            self._removed(e["from_table"])
            self._appeared(e["to_table"])

    def mig_drop_table(self, e: dict) -> None:
        from delta_destination.fivetran._proto import destination_sdk_pb2 as pb

        # a missing table is nothing to drop (success), so the model's table is not required
        if self._migrate(e["table"], drop=pb.DropOperation(drop_table=True)):
            self.model.drop_table(e["table"])
            self._removed(e["table"])

    def mig_add_column_in_history_mode(self, e: dict) -> None:
        from delta_destination.fivetran._proto import destination_sdk_pb2 as pb

        t = self._mig_table(e)
        if t is None or self._history_only(t):
            return
        new = column_from_spec(e["column"], e["data_type"], False)
        text = self._text(e.get("default_value"))
        ts = e["operation_timestamp"]
        if self._migrate(t.schema.name, add=pb.AddOperation(add_column_in_history_mode=pb.AddColumnInHistoryMode(
                column=new.name, column_type=int(new.type), default_value=text, operation_timestamp=ts))):
            self._model_apply(self.model.add_column_in_history_mode, t.schema.name, Column(new.name, new.type), text,
                              _parse_utc(ts))

    def mig_drop_column_in_history_mode(self, e: dict) -> None:
        from delta_destination.fivetran._proto import destination_sdk_pb2 as pb

        t = self._mig_table(e)
        if t is None or self._history_only(t):
            return
        ts = e["operation_timestamp"]
        if self._migrate(t.schema.name, drop=pb.DropOperation(drop_column_in_history_mode=pb.DropColumnInHistoryMode(
                column=e["column"], operation_timestamp=ts))):
            self._model_apply(self.model.drop_column_in_history_mode, t.schema.name, e["column"], _parse_utc(ts))

    def mig_copy_table_to_history_mode(self, e: dict) -> None:
        from delta_destination.fivetran._proto import destination_sdk_pb2 as pb

        t = self._mig_table(e, "from_table")
        soft = e.get("deleted_column") or ""
        if t is not None and self._migrate(e.get("table") or e["from_table"], copy=pb.CopyOperation(
                copy_table_to_history_mode=pb.CopyTableToHistoryMode(
                    from_table=e["from_table"], to_table=e["to_table"], soft_deleted_column=soft))):
            self._model_apply(self.model.copy_table_to_history_mode, e["from_table"], e["to_table"], soft or None)
            self._appeared(e["to_table"])

    def _sync_mode(self, e: dict, kind: str, expect=("success",)) -> bool:
        from delta_destination.fivetran._proto import destination_sdk_pb2 as pb

        op = pb.TableSyncModeMigrationOperation(type=getattr(pb, kind))
        if e.get("deleted_column") is not None:
            op.soft_deleted_column = e["deleted_column"]
        if e.get("keep_deleted_rows") is not None:
            op.keep_deleted_rows = bool(e["keep_deleted_rows"])
        return self._migrate(e["table"], expect=expect, table_sync_mode_migration=op)

    def mig_soft_delete_to_history(self, e: dict) -> None:
        t = self._mig_table(e)
        if t is not None and self._sync_mode(e, "SOFT_DELETE_TO_HISTORY"):
            self._model_apply(self.model.soft_delete_to_history, t.schema.name, e.get("deleted_column") or DELETED)

    def mig_history_to_soft_delete(self, e: dict) -> None:
        t = self._mig_table(e)
        if t is None or self._history_only(t):
            return
        if self._sync_mode(e, "HISTORY_TO_SOFT_DELETE"):
            keep = e.get("keep_deleted_rows")
            self._model_apply(self.model.history_to_soft_delete, t.schema.name, e.get("deleted_column") or DELETED,
                              None if keep is None else bool(keep))

    def mig_live_mode(self, e: dict, kind: str) -> None:
        """SEMANTICS.md: the LIVE_* sync modes are not offered to partners yet, the destination
        answers `unsupported` and the table is unchanged."""
        t = self._mig_table(e)
        if t is not None:
            self._sync_mode(e, kind, expect=("unsupported",))

    def compare_data(self) -> dict:
        tables = {}
        for name, t in self.model.tables.items():
            rows, problems = read_back(self.warehouse, self.schema, t)
            for p in problems:
                self.problem(f"table {name}: {p}")
            if not problems:
                for p in compare_rows(t, rows):
                    self.problem(f"table {name}: {p}")
            cols = t.schema.column_names
            rows.sort(key=lambda r: [sort_key(r.get(c)) for c in cols])
            tables[name] = {"columns": [(c.name, _type_str(c), c.primary_key) for c in t.schema.columns],
                            "rows": rows}
            self.log(f"table {name}: {len(rows)} rows read back, {len(t.rows)} expected")
        return tables

    # -- rows of the input ------------------------------------------------------
    def _input_rows(self, op: str, name: str, raw_rows: list, *, full: bool) -> Optional[list[dict]]:
        """Normalise the tester's rows for a table; None if the table is unknown."""
        t = self.model.tables.get(name)
        if t is None:
            self.problem(f"{op} {name}: the table does not exist")
            return None
        out = []
        for i, raw in enumerate(raw_rows):
            raw = dict(raw)
            op_time = raw.pop(OP_TIME, None)
            if FIVETRAN_ID in t.schema.merge_keys() and raw.get(FIVETRAN_ID) is None:
                content = json.dumps({k: v for k, v in raw.items()}, sort_keys=True, default=str)
                raw[FIVETRAN_ID] = hashlib.md5(content.encode()).hexdigest()
            row = {}
            for c, v in raw.items():
                col = t.schema.get(c)
                if col is None:
                    self.problem(f"{op} {name} row {i}: column {c!r} is not in the table (ignored)")
                    continue
                try:
                    row[c] = normalize(col, v)
                except Exception as e:  # noqa: BLE001
                    self.problem(f"{op} {name} row {i}: column {c!r}: bad value {v!r}: {e}")
            for k in t.business_key:
                if row.get(k) is None:
                    self.problem(f"{op} {name} row {i}: key column {k!r} is missing")
                    break
            else:
                if t.history:
                    row[START] = _parse_utc(op_time) if op_time is not None else None
                    if row[START] is None:
                        self.problem(f"{op} {name} row {i}: history mode needs op_time")
                        continue
                out.append(row)
        return out

    @staticmethod
    def _dedupe_last(t: ModelTable, rows: list[dict]) -> list[dict]:
        by_key: dict = {}
        for r in rows:
            k = t.row_key(r) if t.history else t.bkey(r)
            by_key.pop(k, None)
            by_key[k] = r
        return list(by_key.values())

    @staticmethod
    def _merge_updates(t: ModelTable, rows: list[dict]) -> list[dict]:
        by_key: dict = {}
        for r in rows:
            k = t.row_key(r) if t.history else t.bkey(r)
            merged = by_key.pop(k, {})
            merged.update(r)
            by_key[k] = merged
        return list(by_key.values())

    # -- batch files ---------------------------------------------------------------
    def _marker(self, kind: str) -> str:
        return f"{kind}-{self.rng.getrandbits(64):016x}"

    def _write_file(self, t: ModelTable, kind: str, header: list[str], rows: list[dict],
                    null_string: str, unmodified_string: str, keys: dict) -> str:
        from testkit import batch_files as bf
        from delta_destination.fivetran.batch_files import Compression, FileFormat

        self._file_no += 1
        header = list(header)
        self.rng.shuffle(header)
        ext = ".parquet" if self.file_format == FileFormat.PARQUET else ".csv"
        if self.file_format != FileFormat.PARQUET:
            ext += {Compression.ZSTD: ".zst", Compression.GZIP: ".gz"}.get(self.compression, "")
        if not self.plain_text:
            ext += ".aes"
        # the table's name may be long or hold any character: keep it out of the file name
        path = str(self.tmpdir / f"{self._file_no:04d}_{hashlib.sha1(t.schema.name.encode()).hexdigest()[:12]}_{kind}{ext}")
        out_rows = []
        for r in rows:
            line = []
            for c in header:
                v = r.get(c, bf.UNMODIFIED) if kind == "update" else r.get(c)
                if v is bf.UNMODIFIED or v is bf.NULL:
                    line.append(v)
                elif v is None:
                    line.append(bf.NULL)
                else:
                    line.append(file_value(t.schema.get(c), v))
            out_rows.append(line)
        key = None if self.plain_text else bf.new_key()
        bf.write_batch_file(path, header, out_rows, key=key, compression=self.compression,
                            null_string=null_string, unmodified_string=unmodified_string,
                            file_format=self.file_format, table=_batch_table(t.schema, header))
        if key is not None:
            keys[path] = key
        return path

    def _file_params(self, null_string: str, unmodified_string: str):
        from delta_destination.fivetran._proto import destination_sdk_pb2 as pb

        return pb.FileParams(compression=int(self.compression),
                             encryption=pb.Encryption.NONE if self.plain_text else pb.Encryption.AES,
                             null_string=null_string, unmodified_string=unmodified_string)

    def write_batch(self, t: ModelTable, context: str, *, replace=(), update=(), delete=(),
                    update_header=None, delete_header=None) -> bool:
        from delta_destination.fivetran._proto import destination_sdk_pb2 as pb

        null_s, unmod_s = self._marker("null"), self._marker("unmodified")
        keys: dict = {}
        cols = t.schema.column_names
        req = pb.WriteBatchRequest(configuration=self.configuration, schema_name=self.schema,
                                   table=table_to_proto(t.schema),
                                   file_params=self._file_params(null_s, unmod_s))
        try:
            if replace:
                req.replace_files.append(self._write_file(t, "replace", cols, list(replace), null_s, unmod_s, keys))
            if update:
                req.update_files.append(self._write_file(t, "update", update_header or cols, list(update),
                                                         null_s, unmod_s, keys))
            if delete:
                req.delete_files.append(self._write_file(t, "delete", delete_header or cols, list(delete),
                                                         null_s, unmod_s, keys))
        except Exception as e:  # noqa: BLE001 - a file this client cannot write (e.g. Parquet + unmodified)
            self.problem(f"{context}: cannot write the batch file: {type(e).__name__}: {e}")
            return False
        for p, k in keys.items():
            req.keys[p] = k
        self.log(f"WriteBatch {t.schema.name}: {len(replace)} replace, {len(update)} update, {len(delete)} delete rows")
        resp = self.call("WriteBatch", req, context)
        return resp is not None and resp.WhichOneof("response") == "success"

    def write_history_batch(self, t: ModelTable, context: str, *, earliest=(), replace=(), update=(),
                            delete=()) -> bool:
        from delta_destination.fivetran._proto import destination_sdk_pb2 as pb

        null_s, unmod_s = self._marker("null"), self._marker("unmodified")
        keys: dict = {}
        cols = t.schema.column_names
        bk = t.business_key
        req = pb.WriteHistoryBatchRequest(configuration=self.configuration, schema_name=self.schema,
                                          table=table_to_proto(t.schema),
                                          file_params=self._file_params(null_s, unmod_s))
        try:
            if earliest:
                req.earliest_start_files.append(self._write_file(t, "earliest", bk + [START], list(earliest),
                                                                 null_s, unmod_s, keys))
            if update:
                req.update_files.append(self._write_file(t, "update", cols, list(update), null_s, unmod_s, keys))
            if replace:
                req.replace_files.append(self._write_file(t, "replace", cols, list(replace), null_s, unmod_s, keys))
            if delete:
                req.delete_files.append(self._write_file(t, "delete", bk + [END], list(delete), null_s, unmod_s,
                                                         keys))
        except Exception as e:  # noqa: BLE001
            self.problem(f"{context}: cannot write the batch file: {type(e).__name__}: {e}")
            return False
        for p, k in keys.items():
            req.keys[p] = k
        self.log(f"WriteHistoryBatch {t.schema.name}: {len(earliest)} earliest-start, {len(update)} update, "
                 f"{len(replace)} replace, {len(delete)} delete rows")
        resp = self.call("WriteHistoryBatch", req, context)
        return resp is not None and resp.WhichOneof("response") == "success"

    # -- ops ------------------------------------------------------------------------
    def op_upsert(self, i: int, payload: dict) -> None:
        synced = self.clock.next_op()
        for name, raw_rows in payload.items():
            rows = self._input_rows("upsert", name, raw_rows, full=True)
            if not rows:
                continue
            t = self.model.tables[name]
            ctx = f"ops[{i}] upsert {name}"
            full_rows = []
            for r in rows:
                full = {c: r.get(c) for c in t.schema.column_names}
                full[SYNCED] = synced
                if not t.history and r.get(DELETED) is None:
                    full[DELETED] = False
                full_rows.append(full)
            full_rows = self._dedupe_last(t, full_rows)
            if not t.history:
                if self.write_batch(t, ctx, replace=full_rows):
                    self.model.upsert(name, full_rows)
                continue
            versions = self._history_versions(t, full_rows)
            earliest = self._earliest(t, versions)
            if self.write_history_batch(t, ctx, earliest=earliest, replace=versions):
                self.model.history_earliest_start(name, earliest)
                self.model.history_replace(name, versions)

    def op_update(self, i: int, payload: dict) -> None:
        synced = self.clock.next_op()
        for name, raw_rows in payload.items():
            rows = self._input_rows("update", name, raw_rows, full=False)
            if not rows:
                continue
            t = self.model.tables[name]
            ctx = f"ops[{i}] update {name}"
            rows = [{**r, SYNCED: synced} for r in rows]
            rows = self._merge_updates(t, rows)
            if not t.history:
                if self.write_batch(t, ctx, update=rows):
                    self.model.update(name, rows)
                continue
            versions = self._history_versions(t, rows, partial=True)
            earliest = self._earliest(t, versions)
            if self.write_history_batch(t, ctx, earliest=earliest, update=versions):
                self.model.history_earliest_start(name, earliest)
                self.model.history_update(name, versions)

    def op_delete(self, i: int, payload: dict, *, soft: bool = False) -> None:
        synced = self.clock.next_op()
        kind = "soft_delete" if soft else "delete"
        for name, raw_rows in payload.items():
            rows = self._input_rows(kind, name, raw_rows, full=False)
            if not rows:
                continue
            t = self.model.tables[name]
            ctx = f"ops[{i}] {kind} {name}"
            bk = t.business_key
            if t.history:
                # A history table has no _fivetran_deleted: a soft delete closes the version too.
                by_bk: dict = {}
                for r in rows:  # the last delete of a key wins
                    by_bk.pop(t.bkey(r), None)
                    by_bk[t.bkey(r)] = {**{k: r[k] for k in bk}, END: r[START] - ONE_MS}
                dels = list(by_bk.values())
                if self.write_history_batch(t, ctx, delete=dels):
                    self.model.history_delete(name, dels)
                continue
            keys = self._dedupe_last(t, [{k: r[k] for k in bk} for r in rows])
            if soft:
                upd = [{**k, DELETED: True, SYNCED: synced} for k in keys]
                if self.write_batch(t, ctx, update=upd):
                    self.model.soft_delete(name, keys, synced)
            else:
                dels = [{**k, SYNCED: synced} for k in keys]
                if self.write_batch(t, ctx, delete=dels):
                    self.model.delete(name, keys)

    def op_soft_delete(self, i: int, payload: dict) -> None:
        self.op_delete(i, payload, soft=True)

    def op_truncate(self, i: int, payload: list, *, soft: bool = False) -> None:
        from google.protobuf.timestamp_pb2 import Timestamp
        from delta_destination.fivetran._proto import destination_sdk_pb2 as pb

        cut = self.clock.cut()
        ts = Timestamp()
        ts.FromDatetime(cut)
        kind = "soft_truncate_before" if soft else "truncate_before"
        for name in payload:
            t = self.model.tables.get(name)
            soft_here = soft and not (t is not None and t.history)
            req = pb.TruncateRequest(configuration=self.configuration, schema_name=self.schema, table_name=name,
                                     synced_column=SYNCED, utc_delete_before=ts)
            if soft_here:
                req.soft.deleted_column = DELETED
            self.log(f"Truncate {name} before {format_utc(cut)}{' (soft)' if soft_here else ''}")
            resp = self.call("Truncate", req, f"ops[{i}] {kind} {name}")
            if resp is not None and resp.WhichOneof("response") == "success":
                self.model.truncate(name, cut, DELETED if soft_here else None)

    def op_soft_truncate(self, i: int, payload: list) -> None:
        self.op_truncate(i, payload, soft=True)

    # -- history helpers ----------------------------------------------------------------
    def _history_versions(self, t: ModelTable, rows: list[dict], partial: bool = False) -> list[dict]:
        """Versions of one batch, per key in start order: all but the last closed
        at the next start - 1 ms, the last active until MAX_TS."""
        by_bk: dict = {}
        for r in self._dedupe_last(t, rows) if not partial else self._merge_updates(t, rows):
            by_bk.setdefault(t.bkey(r), []).append(r)
        out = []
        for versions in by_bk.values():
            versions.sort(key=lambda r: r[START])
            carried: dict = {}
            for j, v in enumerate(versions):
                if partial:
                    carried.update(v)
                    v = dict(carried)
                last = j == len(versions) - 1
                v[END] = MAX_TS if last else versions[j + 1][START] - ONE_MS
                v[ACTIVE] = last
                out.append(v)
        return out

    @staticmethod
    def _earliest(t: ModelTable, versions: list[dict]) -> list[dict]:
        first: dict = {}
        for v in versions:
            k = t.bkey(v)
            if k not in first or v[START] < first[k][START]:
                first[k] = {**{c: v[c] for c in t.business_key}, START: v[START]}
        return list(first.values())


def file_value(col: Column, value: Any) -> str:
    """Fivetran CSV text of a normalised model value."""
    t = FT(col.type)
    if t == FT.UTC_DATETIME:
        return format_utc(value)
    if t in (FT.NAIVE_DATE, FT.NAIVE_DATETIME):
        return value.isoformat()
    if t == FT.BINARY:
        return base64.b64encode(value).decode("ascii")
    if t == FT.FLOAT:
        return str(np.float32(value))  # shortest text that round-trips the float32
    if t == FT.DOUBLE:
        return repr(float(value))
    if t == FT.DECIMAL:
        return format(value, "f")
    from testkit import batch_files as bf

    return bf.format_value(t, value)


def _batch_table(schema: TableSchema, header: list[str]) -> TableSchema:
    return TableSchema(schema.name, tuple(schema.get(c) for c in header))


# The tester's op names -> the functions that run them.
OPS: dict[str, Callable[[TesterRun, int, Any], None]] = {
    "upsert": TesterRun.op_upsert,
    "update": TesterRun.op_update,
    "delete": TesterRun.op_delete,
    "soft_delete": TesterRun.op_soft_delete,
    "truncate_before": TesterRun.op_truncate,
    "soft_truncate_before": TesterRun.op_soft_truncate,
}

# The tester's schema_migration names -> functions(run, entry), run in the order the input
# lists them (steps, then op names in each step, then entries). add_column,
# change_column_data_type and drop_column are AlterTable calls; the others are Migrate.
MIGRATIONS: dict[str, Callable[[TesterRun, dict], None]] = {
    "add_column": TesterRun.mig_add_column,
    "change_column_data_type": TesterRun.mig_change_column_data_type,
    "drop_column": TesterRun.mig_drop_column,
    "copy_column": TesterRun.mig_copy_column,
    "update_column_value": TesterRun.mig_update_column_value,
    "add_column_with_default_value": TesterRun.mig_add_column_with_default_value,
    "set_column_to_null": TesterRun.mig_set_column_to_null,
    "copy_table": TesterRun.mig_copy_table,
    "rename_column": TesterRun.mig_rename_column,
    "rename_table": TesterRun.mig_rename_table,
    "drop_table": TesterRun.mig_drop_table,
    "add_column_in_history_mode": TesterRun.mig_add_column_in_history_mode,
    "drop_column_in_history_mode": TesterRun.mig_drop_column_in_history_mode,
    "copy_table_to_history_mode": TesterRun.mig_copy_table_to_history_mode,
    "migrate_soft_delete_to_history": TesterRun.mig_soft_delete_to_history,
    "migrate_history_to_soft_delete": TesterRun.mig_history_to_soft_delete,
    # listed by the tester's README, in none of the input files: expected `unsupported`
    "migrate_history_to_live": lambda run, e: run.mig_live_mode(e, "HISTORY_TO_LIVE"),
    "migrate_soft_delete_to_live": lambda run, e: run.mig_live_mode(e, "SOFT_DELETE_TO_LIVE"),
    "migrate_live_to_soft_delete": lambda run, e: run.mig_live_mode(e, "LIVE_TO_SOFT_DELETE"),
    "migrate_live_to_history": lambda run, e: run.mig_live_mode(e, "LIVE_TO_HISTORY"),
}


def load_input(path) -> dict:
    """Parse a tester input file; decimals keep their exact digits."""
    with open(path, encoding="utf-8") as f:
        return json.load(f, parse_float=Decimal)


def has_history_tables(spec) -> bool:
    """Does the input declare any table with history_mode? Without one, the live-only and the
    history variant of a run are the same run."""
    if isinstance(spec, dict):
        return spec.get("history_mode") is True or any(has_history_tables(v) for v in spec.values())
    if isinstance(spec, list):
        return any(has_history_tables(v) for v in spec)
    return False


def run_input_file(stub, warehouse, input_path, schema: str = "tester", *, live_only: bool = False,
                   compression=None, plain_text: bool = False, file_format=None, seed: int = 0,
                   start_time: Optional[datetime] = None, run_migrations: bool = False,
                   configuration: Optional[dict] = None, log: Optional[Callable[[str], None]] = None) -> RunResult:
    return run_spec(stub, warehouse, load_input(input_path), schema, live_only=live_only, compression=compression,
                    plain_text=plain_text, file_format=file_format, seed=seed, start_time=start_time,
                    run_migrations=run_migrations, configuration=configuration, log=log)


def run_spec(stub, warehouse, spec: dict, schema: str = "tester", *, live_only: bool = False,
             compression=None, plain_text: bool = False, file_format=None, seed: int = 0,
             start_time: Optional[datetime] = None, run_migrations: bool = False,
             configuration: Optional[dict] = None, log: Optional[Callable[[str], None]] = None,
             handover: Optional[tuple[int, Any]] = None) -> RunResult:
    """Like run_input_file, for an input already loaded (or built) as a dict.

    `handover=(n, other_stub)`: from op n on (the remaining ops, migrations, describes) the run
    talks to `other_stub` -- another server on the same warehouse, e.g. the other engine."""
    run = TesterRun(stub, warehouse, copy.deepcopy(spec), schema, live_only=live_only, compression=compression,
                    plain_text=plain_text, file_format=file_format, seed=seed, start_time=start_time,
                    run_migrations=run_migrations, configuration=configuration, log=log)
    return run.run(handover)


def main(argv=None) -> int:
    import grpc
    from delta_destination.fivetran._proto import destination_sdk_pb2_grpc
    from delta_destination.fivetran.batch_files import Compression

    ap = argparse.ArgumentParser(description="Drive the destination like Fivetran's destination tester.")
    ap.add_argument("--port", type=int, default=50052)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--input", required=True, help="tester input JSON file")
    ap.add_argument("--schema", default="tester")
    ap.add_argument("--warehouse", default="./warehouse", help="the server's warehouse directory (read back)")
    ap.add_argument("--plain-text", action="store_true", help="do not encrypt the batch files")
    ap.add_argument("--compression", choices=["zstd", "gzip", "off"], default="zstd")
    ap.add_argument("--live-only", action="store_true", help="treat history_mode tables as live tables")
    ap.add_argument("--migrations", action="store_true", help="run schema_migration steps")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    channel = grpc.insecure_channel(f"{args.host}:{args.port}")
    stub = destination_sdk_pb2_grpc.DestinationConnectorStub(channel)
    result = run_input_file(stub, args.warehouse, args.input, args.schema, live_only=args.live_only,
                            compression=Compression[args.compression.upper()], plain_text=args.plain_text,
                            seed=args.seed, run_migrations=args.migrations, log=print)
    for n in result.notes:
        print(f"note: {n}")
    for name, t in result.tables.items():
        print(f"table {name}: {len(t['rows'])} rows")
    if result.ok:
        print("RESULT: OK, the destination matches the reference model")
        return 0
    print(f"RESULT: MISMATCH ({len(result.problems)} problems)")
    for p in result.problems:
        print(f"  - {p}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
