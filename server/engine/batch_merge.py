"""WriteBatch: all replace, update and delete files of one request in ONE Delta MERGE.

The files are read into Arrow and stacked into one source relation with
positional column names (c<i> = value of table column i, u<i> = "keep the stored
value" flag, op = 0 upsert / 1 update / 2 delete), so customer column names never
collide with ours. One MERGE statement = one Delta commit, so a crash leaves the
table before or after the batch, and a replay converges to the same table.
"""
from __future__ import annotations

import os
import shutil
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Mapping, Optional, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .. import log
from ..batch_reader import BatchData, FileParams, read_batch_file
from ..config import Settings, is_url
from ..errors import MissingKey, SchemaMismatch, ValueConversionError
from ..model import TableSchema
from ..names import quote_ident
from ..type_mapping import arrow_type, spark_type
from .spark_errors import run_engine
from .tables import TableEngine, TableRef, locate

OP_UPSERT, OP_UPDATE, OP_DELETE = 0, 1, 2

# Spark Connect refuses messages over 128 MiB and Sail does not implement the
# chunked cached-relation upload Apache Spark uses for big local data; above
# this size the source is appended to a staging Delta table in chunks instead.
LOCAL_RELATION_LIMIT = int(os.environ.get("FIVETRAN_DELTA_LOCAL_RELATION_LIMIT", 64 * 1024 * 1024))
STAGING_DIR = "_fivetran_staging"


@dataclass
class BatchRequest:
    schema: str
    table: str
    replace_files: Sequence[str] = ()
    update_files: Sequence[str] = ()
    delete_files: Sequence[str] = ()
    keys: Mapping[str, bytes] = field(default_factory=dict)
    params: Optional[FileParams] = None


@dataclass
class BatchResult:
    rows: int
    upserts: int
    updates: int
    deletes: int
    seconds: float


def _key_for(req: BatchRequest, path: str) -> Optional[bytes]:
    key = req.keys.get(path)
    if key is None and req.params is not None and int(req.params.encryption) != 0:
        raise MissingKey(f"no decryption key for batch file {os.path.basename(path)}")
    return key


def read_sources(req: BatchRequest, table: TableSchema) -> tuple[pa.Table, dict]:
    """Read every file and stack them into the positional merge source."""
    keys = table.merge_keys()
    if not keys:
        raise SchemaMismatch(f"table {req.schema}.{req.table} has neither primary key nor _fivetran_id")
    parts: list[tuple[int, BatchData, str]] = []
    for op, paths in ((OP_UPSERT, req.replace_files), (OP_UPDATE, req.update_files), (OP_DELETE, req.delete_files)):
        for path in paths:
            data = read_batch_file(path, _key_for(req, path), req.params, table, allow_unmodified=(op == OP_UPDATE))
            _check_keys(data, keys, path)
            if data.num_rows:
                parts.append((op, data, path))
    counts = {OP_UPSERT: 0, OP_UPDATE: 0, OP_DELETE: 0}
    for op, data, _ in parts:
        counts[op] += data.num_rows
    return _stack(parts, table, keys), counts


def _check_keys(data: BatchData, keys: list[str], path: str) -> None:
    name = os.path.basename(path)
    for k in keys:
        if k not in data.values.column_names:
            raise SchemaMismatch(f"file {name}: key column {k!r} is missing")
        col = data.values.column(k)
        if col.null_count:
            row = pc.index(pc.is_null(col), True).as_py() + 1
            raise ValueConversionError(f"file {name}: key column {k!r} row {row}: NULL or unmodified key")


def file_arrays(data: BatchData, table: TableSchema, is_delete: bool):
    """Per table column: the typed values and the keep-stored-value flag (array, True, or None)."""
    arrays, flags = [], []
    n = data.num_rows
    for c in table.columns:
        typ = arrow_type(c)
        if c.name in data.values.column_names:
            arrays.append(data.values.column(c.name).cast(typ))
            if data.unmodified is not None and c.name in data.unmodified.column_names:
                flags.append(pc.fill_null(data.unmodified.column(c.name), False))
            else:
                flags.append(None)
        else:
            # Column absent from the file: keep the stored value (NULL on insert).
            arrays.append(pa.nulls(n, typ))
            flags.append(True)
        if is_delete:
            flags[-1] = None  # irrelevant: deleted rows are not updated
    return arrays, flags


def _stack(parts, table: TableSchema, keys: list[str]) -> pa.Table:
    cols = table.columns
    key_set = set(keys)
    needs_flag = [False] * len(cols)
    pieces = []
    for op, data, _ in parts:
        arrays, flags = file_arrays(data, table, is_delete=(op == OP_DELETE))
        for i, f in enumerate(flags):
            if cols[i].name in key_set:
                continue
            if f is True or (f is not None and pc.any(f).as_py()):
                needs_flag[i] = True
        pieces.append((op, data.num_rows, arrays, flags))
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
    return pa.concat_tables(out).combine_chunks()


def _check_duplicates(source: pa.Table, table: TableSchema, keys: list[str]) -> None:
    if source.num_rows < 2:
        return
    idx = [f"c{table.column_names.index(k)}" for k in keys]
    counts = source.select(idx).group_by(idx).aggregate([([], "count_all")])
    if counts.num_rows != source.num_rows:
        raise SchemaMismatch(
            "the batch holds the same primary key more than once (Fivetran sends each key at most once per batch)"
        )


def merge_sql(ident: str, view: str, table: TableSchema, source: pa.Table) -> str:
    keys = table.merge_keys()
    names = set(source.column_names)
    on = " AND ".join(f"t.{quote_ident(k)} = s.c{table.column_names.index(k)}" for k in keys)
    ops = set(pc.unique(source.column("op")).to_pylist())
    has_upsert, has_update, has_delete = OP_UPSERT in ops, OP_UPDATE in ops, OP_DELETE in ops

    val = _value_expr

    sets = []
    for i, c in enumerate(table.columns):
        if c.name in keys:
            continue
        if f"u{i}" in names:
            sets.append(f"{quote_ident(c.name)} = CASE WHEN s.u{i} THEN t.{quote_ident(c.name)} ELSE {val(i, c)} END")
        else:
            sets.append(f"{quote_ident(c.name)} = {val(i, c)}")
    clauses = []
    if has_delete:
        clauses.append(f"WHEN MATCHED AND s.op = {OP_DELETE} THEN DELETE")
    if (has_upsert or has_update) and sets:
        clauses.append(f"WHEN MATCHED AND s.op <> {OP_DELETE} THEN UPDATE SET " + ", ".join(sets))
    if has_upsert:
        cols = ", ".join(quote_ident(c.name) for c in table.columns)
        vals = ", ".join(val(i, c) for i, c in enumerate(table.columns))
        clauses.append(f"WHEN NOT MATCHED AND s.op = {OP_UPSERT} THEN INSERT ({cols}) VALUES ({vals})")
    if not clauses:
        return ""
    return f"MERGE INTO {ident} AS t USING {view} AS s ON {on} " + " ".join(clauses)


class BatchMerger:
    def __init__(self, tables: TableEngine):
        self.tables = tables

    def write_batch(self, settings: Settings, req: BatchRequest) -> BatchResult:
        start = time.monotonic()
        ref = locate(settings, req.schema, req.table)
        spark = self.tables.spark(settings)
        with self.tables.locks.for_location(ref.location):
            table = self.tables.require(spark, ref)
            source, counts = read_sources(req, table)
            if source.num_rows == 0:
                log.info(f"WriteBatch {ref.display}: no rows, nothing to commit")
                return BatchResult(0, 0, 0, 0, time.monotonic() - start)
            _check_duplicates(source, table, table.merge_keys())
            ident = self.tables.register(spark, ref)
            self._merge(spark, settings, ref, ident, table, source)
        took = time.monotonic() - start
        log.info(
            f"WriteBatch {ref.display}: {counts[OP_UPSERT]} upserts, {counts[OP_UPDATE]} updates, "
            f"{counts[OP_DELETE]} deletes in one commit, {took:.2f}s"
        )
        return BatchResult(source.num_rows, counts[OP_UPSERT], counts[OP_UPDATE], counts[OP_DELETE], took)

    def _merge(self, spark, settings: Settings, ref: TableRef, ident: str, table: TableSchema, source: pa.Table) -> None:
        with shipped(spark, settings, source) as view:
            if _no_stored_key_matches(spark, ref, ident, view, table):
                # Fast path (initial syncs, new keys): nothing to update or delete, so a plain
                # append of the upserts -- still one commit, no rewrite of existing files.
                sql = insert_sql(ident, view, table, source)
                action = "append to"
            else:
                sql = merge_sql(ident, view, table, source)
                action = "merge into"
            if sql:
                run_engine(f"{action} {ref.display}", lambda: spark.sql(sql).collect())


def _no_stored_key_matches(spark, ref: TableRef, ident: str, view: str, table: TableSchema) -> bool:
    """True when no key of the batch is in the table: reads only the key columns."""
    keys = table.merge_keys()
    on = " AND ".join(f"t.{quote_ident(k)} = s.c{table.column_names.index(k)}" for k in keys)
    sql = f"SELECT 1 FROM {ident} t JOIN {view} s ON {on} LIMIT 1"
    return not run_engine(f"probe keys of {ref.display}", lambda: spark.sql(sql).collect())


def _value_expr(i: int, c) -> str:
    expr = f"s.c{i}"
    if spark_type(c) == "TIMESTAMP_NTZ":  # Arrow naive timestamps arrive as TIMESTAMP; exact in a UTC session
        expr = f"CAST({expr} AS TIMESTAMP_NTZ)"
    return expr


def insert_sql(ident: str, view: str, table: TableSchema, source: pa.Table) -> str:
    if OP_UPSERT not in set(pc.unique(source.column("op")).to_pylist()):
        return ""
    cols = ", ".join(quote_ident(c.name) for c in table.columns)
    vals = ", ".join(_value_expr(i, c) for i, c in enumerate(table.columns))
    return f"INSERT INTO {ident} ({cols}) SELECT {vals} FROM {view} AS s WHERE s.op = {OP_UPSERT}"


@contextmanager
def shipped(spark, settings: Settings, source: pa.Table):
    """Make `source` a temp view in the engine; yields the view name.

    Under the Spark Connect message limit it travels as one local relation; above it, it
    is appended in chunks to a private staging Delta table (Sail lacks chunked cached
    relations), removed afterwards.
    """
    view = f"fivetran_src_{uuid.uuid4().hex}"
    staging: Optional[str] = None
    try:
        if source.nbytes <= LOCAL_RELATION_LIMIT:
            df = spark.createDataFrame(source)
        else:
            staging = _stage(spark, settings, source)
            df = spark.read.format("delta").load(staging)
        df.createOrReplaceTempView(view)
        yield view
    finally:
        try:
            spark.catalog.dropTempView(view)
        except Exception:
            pass
        if staging:
            _remove_staging(staging)


def run_merge(spark, settings: Settings, ref: TableRef, source: pa.Table, sql_template: str) -> None:
    """Ship `source` to the engine and run the MERGE (`{view}` in the template names it)."""
    with shipped(spark, settings, source) as view:
        sql = sql_template.replace("{view}", view)
        run_engine(f"merge into {ref.display}", lambda: spark.sql(sql).collect())


def _stage(spark, settings: Settings, source: pa.Table) -> str:
    """Append the source in chunks under the message limit to a private staging Delta table."""
    wh = settings.warehouse
    name = uuid.uuid4().hex
    path = f"{wh.rstrip('/')}/{STAGING_DIR}/{name}" if is_url(wh) else os.path.join(wh, STAGING_DIR, name)
    rows_per_chunk = max(1, int(source.num_rows * LOCAL_RELATION_LIMIT / max(source.nbytes, 1)))
    for offset in range(0, source.num_rows, rows_per_chunk):
        chunk = source.slice(offset, rows_per_chunk)
        run_engine("stage batch chunk", lambda: spark.createDataFrame(chunk).write.format("delta").mode("append").save(path))
    return path


def _remove_staging(path: str) -> None:
    if not is_url(path):
        shutil.rmtree(path, ignore_errors=True)


def clean_staging(warehouse: str) -> None:
    """Staging tables left by a crash are removed at start-up."""
    if is_url(warehouse):
        return
    shutil.rmtree(os.path.join(warehouse, STAGING_DIR), ignore_errors=True)
