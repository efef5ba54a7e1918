"""Migrate (SDK v2 schema migrations) on Delta tables through Spark.

Semantics follow Fivetran's "Schema Migration Helper Guide"
(fivetran_partner_sdk/schema-migration-helper-service.md); where it is silent
or leaves a choice, the choice is written at the operation below.

Safety rules for every operation:
- replay: a second identical call converges to the same table (renames and
  copies recognise their own finished work, column operations only change
  rows that still differ, mode conversions recognise the converted table);
- atomicity: table renames, drops and copies are one `os.rename` of the table
  directory (copies are written to a hidden directory first); schema changes
  rewrite the table in ONE overwrite commit (Sail 0.7.2 has no ALTER TABLE
  RENAME/ADD/DROP COLUMN, not even with `delta.columnMapping.mode`='name');
  data changes are ONE MERGE;
- the Fivetran metadata (table property `fivetran.schema`) cannot share the
  data commit on Sail (write options do not set table properties and
  REPLACE TABLE ... AS SELECT refuses a new schema), so it is written FIRST as
  a superset (the new columns plus the ones about to disappear):
  DescribeTable only reads the entries of columns the Delta schema has, so the
  table describes correctly before and after the data commit, and a crash in
  between is repaired by the replay. A last metadata commit drops the stale
  entries.
"""
from __future__ import annotations

import enum
import glob
import json
import os
import shutil
import threading
import time
import uuid
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Callable, Iterator, Optional, Union

import pyarrow as pa

from .. import log
from ..batch_reader import _ConversionFailed, _convert_text
from ..config import Settings, is_url
from ..errors import (
    CustomerActionRequired,
    InvalidRequest,
    SchemaMismatch,
    TableAlreadyExists,
    TableNotFound,
    ValueConversionError,
)
from ..model import ACTIVE, DELETED, END, START, SYNCED, Column, FivetranType, TableSchema
from ..names import check_column_name, quote_ident
from ..type_mapping import arrow_type, same_storage, spark_type, validate_decimal
from . import table_metadata
from .batch_merge import run_merge, shipped
from .history_merge import MAX_END_US, ONE_MS
from .spark_errors import run_engine
from .tables import TableEngine, TableRef, locate, validate_columns

SUCCESS = "success"
UNSUPPORTED = "unsupported"

TRASH_DIR = "_fivetran_trash"
TMP_PREFIX = ".fivetran_tmp_"
STALE_TMP_SECONDS = 24 * 3600
# Written into tables made by copy_table / copy_table_to_history_mode, so that a replay
# recognises its own copy instead of failing with "already exists".
COPY_PROPERTY = "fivetran.copy_of"
HISTORY_COLUMNS = (START, END, ACTIVE)
EPOCH_US = 0


# ---- the operations (converted from MigrationDetails by the protocol layer) -----------------
@dataclass(frozen=True)
class DropTable:
    pass


@dataclass(frozen=True)
class DropColumnInHistoryMode:
    column: str
    operation_timestamp: str


@dataclass(frozen=True)
class CopyTable:
    from_table: str
    to_table: str


@dataclass(frozen=True)
class CopyColumn:
    from_column: str
    to_column: str


@dataclass(frozen=True)
class CopyTableToHistoryMode:
    from_table: str
    to_table: str
    soft_deleted_column: Optional[str] = None


@dataclass(frozen=True)
class RenameTable:
    from_table: str
    to_table: str


@dataclass(frozen=True)
class RenameColumn:
    from_column: str
    to_column: str


@dataclass(frozen=True)
class AddColumnWithDefaultValue:
    column: str
    column_type: FivetranType
    default_value: Optional[str] = None


@dataclass(frozen=True)
class AddColumnInHistoryMode:
    column: str
    column_type: FivetranType
    default_value: Optional[str]
    operation_timestamp: str


@dataclass(frozen=True)
class UpdateColumnValue:
    column: str
    value: Optional[str]


class SyncModeMigration(enum.IntEnum):
    """Mirrors fivetran_sdk.v2.TableSyncModeMigrationType (same numbers)."""

    SOFT_DELETE_TO_LIVE = 0
    SOFT_DELETE_TO_HISTORY = 1
    HISTORY_TO_SOFT_DELETE = 2
    HISTORY_TO_LIVE = 3
    LIVE_TO_SOFT_DELETE = 4
    LIVE_TO_HISTORY = 5


@dataclass(frozen=True)
class TableSyncModeMigration:
    type: SyncModeMigration
    soft_deleted_column: Optional[str] = None
    keep_deleted_rows: Optional[bool] = None


Operation = Union[
    DropTable, DropColumnInHistoryMode, CopyTable, CopyColumn, CopyTableToHistoryMode, RenameTable, RenameColumn,
    AddColumnWithDefaultValue, AddColumnInHistoryMode, UpdateColumnValue, TableSyncModeMigration,
]


@dataclass(frozen=True)
class MigrationDetails:
    schema: str
    table: str
    operation: Optional[Operation]


# ---- values -------------------------------------------------------------------------------------
def is_null_text(text: Optional[str]) -> bool:
    """Migration values are text. "NULL" is SQL NULL (the guide: "NULL can also be expected as a
    valid value"); so is the empty string, because proto3 cannot tell an unset value from ""."""
    return text is None or text == "" or text == "NULL"


def parse_value(text: Optional[str], col: Column, what: str) -> pa.Array:
    """One value, parsed exactly like a batch-file cell of that column (1-element Arrow array)."""
    typ = arrow_type(col)
    if is_null_text(text):
        return pa.nulls(1, typ)
    try:
        arr = _convert_text(pa.array([text], pa.string()), col)
    except _ConversionFailed as exc:
        raise ValueConversionError(f"{what}: the value does not fit column {col.name!r} ({_type_name(col)}): {exc.reason}") from None
    return arr.cast(typ)


def parse_timestamp_us(text: str, what: str) -> int:
    """operation_timestamp (e.g. 2005-05-28T20:57:00Z) -> microseconds since the epoch, UTC."""
    if not text or not text.strip():
        raise InvalidRequest(f"{what}: operation_timestamp is empty")
    try:
        arr = _convert_text(pa.array([text.strip()], pa.string()), Column(START, FivetranType.UTC_DATETIME))
    except _ConversionFailed:
        raise InvalidRequest(f"{what}: operation_timestamp is not a UTC timestamp like 2005-05-28T20:57:00Z") from None
    value = arr.cast(pa.int64())[0].as_py()
    if value is None:
        raise InvalidRequest(f"{what}: operation_timestamp is empty")
    return int(value)


def _type_name(col: Column) -> str:
    if col.type == FivetranType.DECIMAL:
        p, s = col.decimal_params()
        return f"DECIMAL({p},{s})"
    return FivetranType(col.type).name


def _ts_array(us: int) -> pa.Array:
    return pa.array([us], pa.int64()).cast(pa.timestamp("us", tz="UTC"))


def _now_ms_us() -> int:
    now = datetime.now(timezone.utc)
    return int(now.timestamp()) * 1_000_000 + (now.microsecond // 1000) * 1000


def _new_column(name: str, ftype: FivetranType) -> Column:
    check_column_name(name)
    if ftype not in FivetranType._value2member_map_:
        raise InvalidRequest(f"column {name!r}: unknown data type {int(ftype)}")
    if ftype == FivetranType.UNSPECIFIED:
        ftype = FivetranType.STRING
    c = Column(name, FivetranType(ftype))
    validate_decimal(c)
    return c


# ---- Delta log helpers (local warehouses) ------------------------------------------------------
def delta_version(location: str) -> int:
    log_dir = os.path.join(location, "_delta_log")
    best = -1
    for n in os.listdir(log_dir) if os.path.isdir(log_dir) else ():
        if len(n) == 25 and n.endswith(".json") and n[:20].isdigit():
            best = max(best, int(n[:20]))
    return best


def latest_property(location: str, key: str) -> Optional[str]:
    """The value of a table property in the newest metaData action of the JSON commits."""
    files = sorted(glob.glob(os.path.join(glob.escape(location), "_delta_log", "[0-9]" * 20 + ".json")))
    for path in reversed(files):
        metas = []
        try:
            with open(path, encoding="utf-8") as f:
                for line in f:
                    if '"metaData"' in line:
                        action = json.loads(line)
                        if isinstance(action, dict) and isinstance(action.get("metaData"), dict):
                            metas.append(action["metaData"])
        except (OSError, ValueError):
            continue
        if metas:
            return (metas[-1].get("configuration") or {}).get(key)
    return None


# ---- the migrator -------------------------------------------------------------------------------
class Migrator:
    def __init__(self, tables: TableEngine):
        self.tables = tables
        self._trash_lock = threading.Lock()
        self._handlers: dict[type, Callable] = {
            DropTable: self.drop_table,
            DropColumnInHistoryMode: self.drop_column_in_history_mode,
            CopyTable: self.copy_table,
            CopyColumn: self.copy_column,
            CopyTableToHistoryMode: self.copy_table_to_history_mode,
            RenameTable: self.rename_table,
            RenameColumn: self.rename_column,
            AddColumnWithDefaultValue: self.add_column_with_default_value,
            AddColumnInHistoryMode: self.add_column_in_history_mode,
            UpdateColumnValue: self.update_column_value,
            TableSyncModeMigration: self.table_sync_mode_migration,
        }

    def migrate(self, settings: Settings, details: MigrationDetails) -> str:
        """Runs one migration; returns SUCCESS or UNSUPPORTED, raises typed errors."""
        op = details.operation
        handler = self._handlers.get(type(op))
        if handler is None:
            raise InvalidRequest("the migration request names no known operation")
        start = time.monotonic()
        result, summary = handler(settings, details, op)
        log.info(f"Migrate {details.schema}.{details.table}: {summary} ({time.monotonic() - start:.2f}s)")
        return result

    # ---- plumbing -----------------------------------------------------------------------------
    @contextmanager
    def _locked(self, *refs: TableRef) -> Iterator[None]:
        """Locks in a fixed (sorted) order, so two-table operations cannot deadlock."""
        with ExitStack() as stack:
            for location in sorted({r.location for r in refs}):
                stack.enter_context(self.tables.locks.for_location(location))
            yield

    def _unregister(self, spark, ref: TableRef) -> None:
        self.tables.schema_changed(spark, ref)
        self.tables.forget(ref)

    def _tidy_metadata(self, spark, ref: TableRef, cur: TableSchema) -> None:
        """After a crash between the data commit and the last metadata commit, the stored
        metadata still lists vanished columns: write exactly what the table holds."""
        meta = self.tables._metadata(spark, ref)
        if meta is None or tuple(meta.columns) != tuple(cur.columns):
            self.tables._set_metadata(spark, ref, cur)

    def _rewrite(self, spark, ref: TableRef, current: TableSchema, target: TableSchema, make_df) -> None:
        """New schema + data in ONE overwrite commit, metadata before (superset) and after."""
        validate_columns(target)
        removed = tuple(c for c in current.columns if not target.has(c.name))
        self.tables._set_metadata(spark, ref, TableSchema(target.name, target.columns + removed))

        def go():
            make_df().write.format("delta").mode("overwrite").option("overwriteSchema", "true").save(ref.location)

        run_engine(f"rewrite {ref.display}", go)
        self._refresh_catalog(spark, ref)
        if removed:
            self.tables._set_metadata(spark, ref, target)

    def _refresh_catalog(self, spark, ref: TableRef) -> None:
        """Sail's catalog entry keeps the column list it was registered with (CreateTable names the
        columns): after a schema change, SQL through it fails on renamed columns and casts to old
        types. Dropping the (external) entry makes the next register() read the Delta log again."""
        run_engine(f"refresh the catalog entry of {ref.display}", lambda: self.tables.unregister(spark, ref))

    def _read(self, spark, location: str):
        return spark.read.format("delta").load(location)

    def _set_all_rows(self, spark, settings: Settings, ref: TableRef, col: Column, value: pa.Array) -> None:
        """column := value on every row whose value differs, in one MERGE (no commit if none)."""
        ident = self.tables.register(spark, ref)
        c, v = quote_ident(col.name), f"CAST(s.v AS {spark_type(col)})"
        sql = f"MERGE INTO {ident} AS t USING {{view}} AS s ON true WHEN MATCHED AND NOT (t.{c} <=> {v}) THEN UPDATE SET {c} = {v}"
        run_merge(spark, settings, ref, pa.table({"v": value}), sql)

    def _require_local(self, settings: Settings) -> bool:
        return not is_url(settings.warehouse)

    def _fs(self, action: str, fn):
        try:
            return fn()
        except OSError as exc:
            raise CustomerActionRequired(
                f"{action} failed: the warehouse directory refused it ({type(exc).__name__}: {exc.strerror or 'error'})"
            ) from exc

    # ---- drop table ---------------------------------------------------------------------------
    def drop_table(self, settings: Settings, d: MigrationDetails, op: DropTable):
        ref = locate(settings, d.schema, d.table)
        if not self._require_local(settings):
            return UNSUPPORTED, "drop_table needs a local warehouse directory"
        spark = self.tables.spark(settings)
        with self._locked(ref):
            if not os.path.isdir(ref.location):
                self._unregister(spark, ref)
                return SUCCESS, "drop_table: the table does not exist (nothing to drop)"
            trash = os.path.join(settings.warehouse, TRASH_DIR)
            dest = os.path.join(trash, uuid.uuid4().hex)
            self._fs("drop_table", lambda: (os.makedirs(trash, exist_ok=True), os.rename(ref.location, dest)))
            self._unregister(spark, ref)
        self._empty_trash(trash)
        return SUCCESS, "drop_table: dropped"

    def _empty_trash(self, trash: str) -> None:
        """Deletes the dropped tables (also those left by a crash after the rename)."""
        with self._trash_lock:
            for name in os.listdir(trash) if os.path.isdir(trash) else ():
                shutil.rmtree(os.path.join(trash, name), ignore_errors=True)

    # ---- rename table -------------------------------------------------------------------------
    def rename_table(self, settings: Settings, d: MigrationDetails, op: RenameTable):
        src = locate(settings, d.schema, op.from_table or d.table)
        dst = locate(settings, d.schema, op.to_table)
        if not self._require_local(settings):
            return UNSUPPORTED, "rename_table needs a local warehouse directory"
        if src.location == dst.location:
            return SUCCESS, "rename_table: same name, nothing to do"
        spark = self.tables.spark(settings)
        with self._locked(src, dst):
            src_exists, dst_exists = self.tables.exists(spark, src), self.tables.exists(spark, dst)
            if dst_exists and src_exists:
                raise TableAlreadyExists(f"rename_table: table {dst.display} already exists; {src.display} was not renamed")
            if dst_exists:
                self._unregister(spark, src)
                return SUCCESS, f"rename_table: {src.display} is already renamed to {dst.table} (replay)"
            if not src_exists:
                raise TableNotFound(f"rename_table: table {src.display} does not exist")
            self._clear_way(dst)
            self._fs("rename_table", lambda: os.rename(src.location, dst.location))
            self._unregister(spark, src)
            self._unregister(spark, dst)
        return SUCCESS, f"rename_table: renamed to {dst.table}"

    def _clear_way(self, dst: TableRef) -> None:
        """A failed CREATE can leave an empty table directory at the target: remove it; refuse
        anything else that is in the way."""
        self.tables._clear_failed_create(dst)
        if os.path.lexists(dst.location):
            raise TableAlreadyExists(f"{dst.display}: a directory that is not a Delta table is in the way")

    # ---- copy table ---------------------------------------------------------------------------
    def copy_table(self, settings: Settings, d: MigrationDetails, op: CopyTable):
        return self._copy(settings, d, op.from_table or d.table, op.to_table, kind="copy", soft=None)

    def copy_table_to_history_mode(self, settings: Settings, d: MigrationDetails, op: CopyTableToHistoryMode):
        return self._copy(settings, d, op.from_table or d.table, op.to_table, kind="history",
                          soft=op.soft_deleted_column or None)

    def _copy(self, settings: Settings, d: MigrationDetails, from_table: str, to_table: str, kind: str,
              soft: Optional[str]):
        what = "copy_table" if kind == "copy" else "copy_table_to_history_mode"
        src = locate(settings, d.schema, from_table)
        dst = locate(settings, d.schema, to_table)
        if not self._require_local(settings):
            return UNSUPPORTED, f"{what} needs a local warehouse directory"
        if src.location == dst.location:
            raise InvalidRequest(f"{what}: source and target are the same table")
        spark = self.tables.spark(settings)
        with self._locked(src, dst):
            source = self.tables.describe_ref(spark, src)
            version = delta_version(src.location) if source is not None else None
            marker = {"source": src.display, "version": version, "kind": kind}
            if self.tables.exists(spark, dst):
                if self._is_own_copy(dst, marker, source is not None):
                    return SUCCESS, f"{what}: {dst.table} is already this copy (replay)"
                raise TableAlreadyExists(f"{what}: table {dst.display} already exists")
            if source is None:
                raise TableNotFound(f"{what}: table {src.display} does not exist")
            if kind == "copy":
                target = TableSchema(dst.table, source.columns)
                make_df = lambda: self._read(spark, src.location)  # noqa: E731
                how = "copied into"
            else:
                if source.is_history_mode:
                    raise SchemaMismatch(f"{what}: table {src.display} is already in history mode")
                target, make_df, how = self._to_history(spark, src.location, source, soft, live=not soft)
                target = TableSchema(dst.table, target.columns)
                how = f"({how}) copied into"
            self._create_from(spark, dst, target, make_df, json.dumps(marker, separators=(",", ":")))
        return SUCCESS, f"{what}: {how} {dst.table}"

    def _is_own_copy(self, dst: TableRef, marker: dict, source_exists: bool) -> bool:
        try:
            got = json.loads(latest_property(dst.location, COPY_PROPERTY) or "null")
        except ValueError:
            return False
        if not isinstance(got, dict) or got.get("source") != marker["source"] or got.get("kind") != marker["kind"]:
            return False
        return not source_exists or got.get("version") == marker["version"]

    def _create_from(self, spark, dst: TableRef, target: TableSchema, make_df, marker: str) -> None:
        """Writes a new table (data + schema + properties: one commit) into a hidden directory
        next to the target, then renames it into place."""
        validate_columns(target)
        self._clear_way(dst)
        parent = os.path.dirname(dst.location)
        self._fs("create the schema directory", lambda: os.makedirs(parent, exist_ok=True))
        _clean_stale_tmp(parent)
        token = uuid.uuid4().hex
        tmp, tmp_ident = os.path.join(parent, TMP_PREFIX + token), f"fivetran_tmp_{token}"
        props = table_metadata.encode(target, 1)
        try:
            def go():
                (make_df().writeTo(tmp_ident).using("delta")
                 .tableProperty(table_metadata.PROPERTY, props).tableProperty(COPY_PROPERTY, marker)
                 .option("path", tmp).create())

            run_engine(f"write {dst.display}", go, attempts=1)
            run_engine("unregister the temporary table", lambda: spark.sql(f"DROP TABLE IF EXISTS {tmp_ident}").collect())
            self._fs(f"move the new table into {dst.display}", lambda: os.rename(tmp, dst.location))
        finally:
            try:
                spark.sql(f"DROP TABLE IF EXISTS {tmp_ident}").collect()
            except Exception:  # noqa: BLE001 - best effort
                pass
            shutil.rmtree(tmp, ignore_errors=True)
        self._unregister(spark, dst)

    # ---- columns ------------------------------------------------------------------------------
    def rename_column(self, settings: Settings, d: MigrationDetails, op: RenameColumn):
        ref = locate(settings, d.schema, d.table)
        spark = self.tables.spark(settings)
        with self._locked(ref):
            cur = self.tables.require(spark, ref)
            if op.from_column == op.to_column:
                return SUCCESS, "rename_column: same name, nothing to do"
            old, new = cur.get(op.from_column), cur.get(op.to_column)
            if old is None and new is not None:
                self._tidy_metadata(spark, ref, cur)
                return SUCCESS, f"rename_column: {op.from_column!r} is already renamed to {op.to_column!r} (replay)"
            if old is None:
                raise SchemaMismatch(f"rename_column: column {op.from_column!r} does not exist in {ref.display}")
            if new is not None:
                raise SchemaMismatch(f"rename_column: column {op.to_column!r} already exists in {ref.display}")
            check_column_name(op.to_column)
            target = cur.with_columns(c.with_(name=op.to_column) if c.name == op.from_column else c for c in cur.columns)

            def make_df():
                from pyspark.sql import functions as F

                return self._read(spark, ref.location).select(
                    *[F.col(quote_ident(c.name)).alias(t.name) for c, t in zip(cur.columns, target.columns)])

            self._rewrite(spark, ref, cur, target, make_df)
        return SUCCESS, f"rename_column: {op.from_column!r} renamed to {op.to_column!r} (table rewritten in one commit)"

    def copy_column(self, settings: Settings, d: MigrationDetails, op: CopyColumn):
        ref = locate(settings, d.schema, d.table)
        spark = self.tables.spark(settings)
        with self._locked(ref):
            cur = self.tables.require(spark, ref)
            src = cur.get(op.from_column)
            if src is None:
                raise SchemaMismatch(f"copy_column: column {op.from_column!r} does not exist in {ref.display}")
            if op.from_column == op.to_column:
                return SUCCESS, "copy_column: same column, nothing to do"
            existing = cur.get(op.to_column)
            if existing is not None:
                if not same_storage(existing, src):
                    raise SchemaMismatch(f"copy_column: column {op.to_column!r} already exists with another type")
                ident = self.tables.register(spark, ref)
                f, t = quote_ident(op.from_column), quote_ident(op.to_column)
                sql = f"UPDATE {ident} SET {t} = {f} WHERE NOT ({t} <=> {f})"
                run_engine(f"copy column in {ref.display}", lambda: spark.sql(sql).collect())
                return SUCCESS, f"copy_column: {op.to_column!r} exists, values copied where they differed"
            check_column_name(op.to_column)
            target = cur.with_columns(cur.columns + (src.with_(name=op.to_column, primary_key=False),))

            def make_df():
                from pyspark.sql import functions as F

                return self._read(spark, ref.location).select(
                    *[F.col(quote_ident(c.name)) for c in cur.columns], F.col(quote_ident(src.name)).alias(op.to_column))

            self._rewrite(spark, ref, cur, target, make_df)
        return SUCCESS, f"copy_column: {op.from_column!r} copied to new column {op.to_column!r}"

    def add_column_with_default_value(self, settings: Settings, d: MigrationDetails, op: AddColumnWithDefaultValue):
        what = "add_column_with_default_value"
        ref = locate(settings, d.schema, d.table)
        new = _new_column(op.column, op.column_type)
        spark = self.tables.spark(settings)
        with self._locked(ref):
            cur = self.tables.require(spark, ref)
            existing = cur.get(new.name)
            if existing is not None:
                # The guide: if the column exists, still set the default on all rows. The
                # table's type wins over the request's.
                value = parse_value(op.default_value, existing, what)
                self._set_all_rows(spark, settings, ref, existing, value)
                return SUCCESS, f"{what}: column {new.name!r} exists, default set on every row"
            value = parse_value(op.default_value, new, what)
            target = cur.with_columns(cur.columns + (new,))
            param = _param_name(cur)

            def make_df():
                from pyspark.sql import functions as F

                p = spark.createDataFrame(pa.table({param: value}))
                return self._read(spark, ref.location).crossJoin(p).select(
                    *[F.col(quote_ident(c.name)) for c in cur.columns],
                    F.col(param).cast(spark_type(new)).alias(new.name))

            self._rewrite(spark, ref, cur, target, make_df)
        return SUCCESS, f"{what}: column {new.name!r} added with its default (one commit)"

    def update_column_value(self, settings: Settings, d: MigrationDetails, op: UpdateColumnValue):
        ref = locate(settings, d.schema, d.table)
        spark = self.tables.spark(settings)
        with self._locked(ref):
            cur = self.tables.require(spark, ref)
            col = cur.get(op.column)
            if col is None:
                raise SchemaMismatch(f"update_column_value: column {op.column!r} does not exist in {ref.display}")
            value = parse_value(op.value, col, "update_column_value")
            self._set_all_rows(spark, settings, ref, col, value)
        return SUCCESS, f"update_column_value: column {op.column!r} set to {'NULL' if value.null_count else 'the value'} on every row"

    # ---- history-mode columns -----------------------------------------------------------------
    def add_column_in_history_mode(self, settings: Settings, d: MigrationDetails, op: AddColumnInHistoryMode):
        what = "add_column_in_history_mode"
        ref = locate(settings, d.schema, d.table)
        new = _new_column(op.column, op.column_type)
        ts = parse_timestamp_us(op.operation_timestamp, what)
        spark = self.tables.spark(settings)
        with self._locked(ref):
            cur = self.tables.require(spark, ref)
            keys = _history_keys(cur, ref, what)
            existing = cur.get(new.name)
            if existing is None:
                # A new column: schema and versions in ONE overwrite commit, so a crash leaves the
                # table before or after (adding the column, then a MERGE, left NULL-only versions).
                table = cur.with_columns(cur.columns + (new,))
                value = parse_value(op.default_value, new, what)
                self._history_add_rewrite(spark, settings, ref, cur, table, keys, new, value, ts)
                return SUCCESS, f"{what}: column {new.name!r} added and active versions recorded (one commit)"
            if not same_storage(existing, new):
                raise SchemaMismatch(f"{what}: column {new.name!r} already exists with another type")
            value = parse_value(op.default_value, existing, what)
            self._history_versions(spark, settings, ref, cur, keys, existing, value, ts, adding=True)
        return SUCCESS, f"{what}: column {new.name!r} exists; active versions recorded"

    def _history_add_rewrite(self, spark, settings: Settings, ref: TableRef, cur: TableSchema, table: TableSchema,
                             keys: list[str], new: Column, value: pa.Array, ts: int) -> None:
        """The whole table with `new` added, as _history_versions would leave it after adding the
        column: active versions that started before ts are closed at ts - 1 ms and continued by a
        copy starting at ts holding the value; versions starting at ts get the value in place."""
        ident = self.tables.register(spark, ref)
        q = quote_ident
        s_, a_ = q(START), q(ACTIVE)
        v = f"CAST(p.v AS {spark_type(new)})"
        open_before = f"h.{a_} = true AND h.{s_} < p.ts AND {v} IS NOT NULL"
        in_place = f"(h.{s_} = p.ts OR (h.{a_} = true AND h.{s_} > p.ts))"

        def row(insert: bool) -> str:
            out = []
            for c in table.columns:
                if c.name == new.name:
                    e = v if insert else f"CASE WHEN {in_place} THEN {v} END"
                elif c.name == START and insert:
                    e = f"CAST(p.ts AS {spark_type(c)})"
                elif c.name == END:
                    e = f"CAST(p.mx AS {spark_type(c)})" if insert else f"CASE WHEN {open_before} THEN CAST(p.te AS {spark_type(c)}) ELSE h.{q(c.name)} END"
                elif c.name == ACTIVE:
                    e = "true" if insert else f"CASE WHEN {open_before} THEN false ELSE h.{a_} END"
                else:
                    e = f"h.{q(c.name)}"
                out.append(f"{e} AS {q(c.name)}")
            return ", ".join(out)

        taken_on = " AND ".join(f"h.{q(k)} = x.{q(k)}" for k in keys)
        params = pa.table({"ts": _ts_array(ts), "te": _ts_array(ts - ONE_MS), "mx": _ts_array(MAX_END_US), "v": value})
        with shipped(spark, settings, params) as view:
            sql = (
                f"SELECT {row(False)} FROM {ident} h CROSS JOIN {view} p "
                f"UNION ALL SELECT {row(True)} FROM {ident} h CROSS JOIN {view} p "
                f"LEFT ANTI JOIN (SELECT {', '.join('y.' + q(k) for k in keys)} FROM {ident} y CROSS JOIN {view} p2 "
                f"WHERE y.{s_} = p2.ts) x ON {taken_on} WHERE {open_before}"
            )
            self._rewrite(spark, ref, cur, table, lambda: spark.sql(sql))

    def drop_column_in_history_mode(self, settings: Settings, d: MigrationDetails, op: DropColumnInHistoryMode):
        what = "drop_column_in_history_mode"
        ref = locate(settings, d.schema, d.table)
        ts = parse_timestamp_us(op.operation_timestamp, what)
        spark = self.tables.spark(settings)
        with self._locked(ref):
            cur = self.tables.require(spark, ref)
            keys = _history_keys(cur, ref, what)
            col = cur.get(op.column)
            if col is None:
                return SUCCESS, f"{what}: column {op.column!r} does not exist, nothing to do"
            if col.name in keys or col.name in HISTORY_COLUMNS:
                raise InvalidRequest(f"{what}: column {op.column!r} is a key or history column")
            # In history mode the column stays in the schema; the new versions hold NULL.
            self._history_versions(spark, settings, ref, cur, keys, col, pa.nulls(1, arrow_type(col)), ts, adding=False)
        return SUCCESS, f"{what}: column {op.column!r} kept, new versions without its value"

    def _history_versions(self, spark, settings: Settings, ref: TableRef, table: TableSchema, keys: list[str],
                          col: Column, value: pa.Array, ts: int, adding: bool) -> None:
        """One MERGE recording `col := value` as of `ts` (the guide's INSERT + UPDATE steps):
        - an active version that started before ts and whose value differs is closed
          (_fivetran_active = false, _fivetran_end = ts - 1 ms) and a copy starting at ts,
          active until the maximum timestamp, gets the value (_fivetran_synced is kept);
        - versions starting exactly at ts get the value in place, so several migrations with
          the same operation_timestamp (or a replay) record history once;
        - an active version starting after ts (against the guide's precondition) gets the value
          in place when it has none yet (for an added column) / always (for a dropped one).
        Historical versions are never touched; for an added column they keep NULL."""
        ident = self.tables.register(spark, ref)
        names = table.column_names
        idx = {n: i for i, n in enumerate(names)}
        q = quote_ident
        s_, e_, a_, c_ = q(START), q(END), q(ACTIVE), q(col.name)
        v = f"CAST(p.v AS {spark_type(col)})"
        differs = f"NOT (h.{c_} <=> {v})"
        CLOSE, INSERT, SET = 1, 0, 2

        def branch(kind: int) -> str:
            out = []
            for i, c in enumerate(table.columns):
                e = f"h.{q(c.name)}"
                if kind == CLOSE and c.name == END:
                    e = f"CAST(p.te AS {spark_type(c)})"
                elif kind == CLOSE and c.name == ACTIVE:
                    e = "false"
                elif kind == INSERT and c.name == START:
                    e = f"CAST(p.ts AS {spark_type(c)})"
                elif kind == INSERT and c.name == END:
                    e = f"CAST(p.mx AS {spark_type(c)})"
                elif kind == INSERT and c.name == ACTIVE:
                    e = "true"
                elif kind in (INSERT, SET) and c.name == col.name:
                    e = v
                out.append(f"{e} AS c{i}")
            return ", ".join(out) + f", {kind} AS op"

        open_before = f"h.{a_} = true AND h.{s_} < p.ts AND {differs}"
        at_ts = f"(h.{s_} = p.ts OR (h.{a_} = true AND h.{s_} > p.ts{f' AND h.{c_} IS NULL' if adding else ''}))"
        # keys that already have a version at ts get no second one (it is updated in place)
        taken_on = " AND ".join(f"h.{q(k)} = x.k{i}" for i, k in enumerate(keys)) or "true"
        taken = (f"(SELECT {', '.join(f'y.{q(k)} AS k{i}' for i, k in enumerate(keys)) or '1 AS k'} "
                 f"FROM {ident} y CROSS JOIN {{view}} p2 WHERE y.{s_} = p2.ts)")
        source = (
            f"SELECT {branch(CLOSE)} FROM {ident} h CROSS JOIN {{view}} p WHERE {open_before} "
            f"UNION ALL SELECT {branch(INSERT)} FROM {ident} h CROSS JOIN {{view}} p LEFT ANTI JOIN {taken} x ON {taken_on} "
            f"WHERE {open_before} "
            f"UNION ALL SELECT {branch(SET)} FROM {ident} h CROSS JOIN {{view}} p WHERE {at_ts} AND {differs}"
        )
        on = " AND ".join(f"t.{q(k)} = s.c{idx[k]}" for k in keys + [START])
        cols = ", ".join(q(n) for n in names)
        vals = ", ".join(f"s.c{i}" for i in range(len(names)))
        sql = (
            f"MERGE INTO {ident} AS t USING ({source}) AS s ON {on} "
            f"WHEN MATCHED AND s.op = {CLOSE} THEN UPDATE SET {a_} = false, {e_} = s.c{idx[END]} "
            f"WHEN MATCHED AND s.op = {SET} THEN UPDATE SET {c_} = s.c{idx[col.name]} "
            f"WHEN NOT MATCHED AND s.op = {INSERT} THEN INSERT ({cols}) VALUES ({vals})"
        )
        params = pa.table({"ts": _ts_array(ts), "te": _ts_array(ts - ONE_MS), "mx": _ts_array(MAX_END_US), "v": value})
        run_merge(spark, settings, ref, params, sql)

    # ---- sync modes ---------------------------------------------------------------------------
    def table_sync_mode_migration(self, settings: Settings, d: MigrationDetails, op: TableSyncModeMigration):
        if op.type == SyncModeMigration.SOFT_DELETE_TO_HISTORY:
            return self._soft_delete_to_history(settings, d, op)
        if op.type == SyncModeMigration.HISTORY_TO_SOFT_DELETE:
            return self._history_to_soft_delete(settings, d, op)
        # SEMANTICS.md: the LIVE_* modes are not offered to partners yet.
        locate(settings, d.schema, d.table)
        return UNSUPPORTED, f"{op.type.name} is not supported (live mode is not offered to partners yet)"

    def _soft_delete_to_history(self, settings: Settings, d: MigrationDetails, op: TableSyncModeMigration):
        ref = locate(settings, d.schema, d.table)
        soft = op.soft_deleted_column or DELETED
        spark = self.tables.spark(settings)
        with self._locked(ref):
            cur = self.tables.require(spark, ref)
            if cur.is_history_mode:
                self._tidy_metadata(spark, ref, cur)
                return SUCCESS, "SOFT_DELETE_TO_HISTORY: already in history mode (replay)"
            target, make_df, how = self._to_history(spark, ref.location, cur, soft, live=False)
            self._rewrite(spark, ref, cur, target, make_df)
        return SUCCESS, f"SOFT_DELETE_TO_HISTORY: {how} (one commit)"

    def _to_history(self, spark, location: str, cur: TableSchema, soft: Optional[str], live: bool):
        """The guide's SOFT_DELETE_TO_HISTORY (LIVE_TO_HISTORY when `live`):
        rows not soft-deleted: _fivetran_start = MAX(_fivetran_synced) of the table (NOW() for a
        live table, or when there is no synced value), _fivetran_end = 9999-12-31T23:59:59.999Z,
        _fivetran_active = true; soft-deleted rows: start = end = 1970-01-01 (the guide's
        minTimestamp), active = false. _fivetran_start joins the primary key.
        `_fivetran_deleted` is dropped (it has no meaning in history mode); another soft-delete
        column is source data and is kept (as the guide's SOFT_DELETE_TO_LIVE does)."""
        from pyspark.sql import functions as F

        for c in HISTORY_COLUMNS:
            if cur.has(c):
                raise SchemaMismatch(f"table {cur.name!r} already has the history column {c} but is not in history mode")
        soft_col = cur.get(soft) if soft else None
        if soft_col is not None and soft_col.type != FivetranType.BOOLEAN:
            raise SchemaMismatch(f"soft-delete column {soft!r} is not BOOLEAN")
        use_soft = soft_col is not None and not live
        drop_soft = soft_col is not None and soft_col.name == DELETED
        kept = tuple(c for c in cur.columns if not (drop_soft and c.name == DELETED))
        target = cur.with_columns(kept + (
            Column(START, FivetranType.UTC_DATETIME, primary_key=True),
            Column(END, FivetranType.UTC_DATETIME),
            Column(ACTIVE, FivetranType.BOOLEAN),
        ))
        start_us = None
        if not live and cur.has(SYNCED):
            got = run_engine("read the latest _fivetran_synced", lambda: self._read(spark, location)
                             .agg(F.max(F.col(quote_ident(SYNCED))).alias("m")).toArrow())
            m = got.column(0).cast(pa.timestamp("us", tz="UTC")).cast(pa.int64())[0].as_py() if got.num_rows else None
            start_us = m
        how = "start = latest _fivetran_synced" if start_us is not None else "start = now"
        if start_us is None:
            start_us = _now_ms_us()
        names = {p: f"{p}_{uuid.uuid4().hex[:8]}" for p in ("st", "ep", "mx")}
        params = pa.table({names["st"]: _ts_array(start_us), names["ep"]: _ts_array(EPOCH_US), names["mx"]: _ts_array(MAX_END_US)})

        def make_df():
            base = self._read(spark, location)
            p = spark.createDataFrame(params)
            deleted = F.coalesce(F.col(quote_ident(soft_col.name)), F.lit(False)) if use_soft else F.lit(False)
            return base.crossJoin(p).select(
                *[F.col(quote_ident(c.name)) for c in kept],
                F.when(deleted, F.col(names["ep"])).otherwise(F.col(names["st"])).cast("TIMESTAMP").alias(START),
                F.when(deleted, F.col(names["ep"])).otherwise(F.col(names["mx"])).cast("TIMESTAMP").alias(END),
                (~deleted).alias(ACTIVE),
            )

        how += "; soft-deleted rows inactive" if use_soft else "; all rows active"
        return target, make_df, how

    def _history_to_soft_delete(self, settings: Settings, d: MigrationDetails, op: TableSyncModeMigration):
        """The guide's HISTORY_TO_SOFT_DELETE: keep each key's latest version (greatest
        _fivetran_start), soft-deleted column := NOT _fivetran_active (added as BOOLEAN when
        missing), drop _fivetran_start/_end/_active and take _fivetran_start out of the key.
        keep_deleted_rows is honoured only when explicitly false (then keys whose latest version
        is inactive are removed); soft-delete mode otherwise keeps deleted rows, flagged."""
        from pyspark.sql import Window, functions as F

        what = "HISTORY_TO_SOFT_DELETE"
        ref = locate(settings, d.schema, d.table)
        soft = op.soft_deleted_column or DELETED
        check_column_name(soft)
        spark = self.tables.spark(settings)
        with self._locked(ref):
            cur = self.tables.require(spark, ref)
            if not cur.is_history_mode:
                if cur.has(soft):
                    self._tidy_metadata(spark, ref, cur)
                    return SUCCESS, f"{what}: already in soft-delete mode (replay)"
                raise SchemaMismatch(f"{what}: table {ref.display} is not in history mode")
            keys = _history_keys(cur, ref, what)
            existing = cur.get(soft)
            if existing is not None and existing.type != FivetranType.BOOLEAN:
                raise SchemaMismatch(f"{what}: soft-delete column {soft!r} is not BOOLEAN")
            kept = [c for c in cur.columns if c.name not in HISTORY_COLUMNS]
            if existing is None:
                kept.append(Column(soft, FivetranType.BOOLEAN))
            target = cur.with_columns(kept)
            drop_deleted = op.keep_deleted_rows is False
            rn = f"fivetran_rn_{uuid.uuid4().hex[:8]}"

            def make_df():
                base = self._read(spark, ref.location)
                w = Window.partitionBy(*[F.col(quote_ident(k)) for k in keys]).orderBy(F.col(quote_ident(START)).desc())
                latest = base.withColumn(rn, F.row_number().over(w)).where(F.col(rn) == 1)
                if drop_deleted:
                    latest = latest.where(F.col(quote_ident(ACTIVE)) == F.lit(True))
                deleted = F.coalesce(~F.col(quote_ident(ACTIVE)), F.lit(False))
                return latest.select(*[deleted.alias(c.name) if c.name == soft else F.col(quote_ident(c.name)) for c in target.columns])

            self._rewrite(spark, ref, cur, target, make_df)
        return SUCCESS, f"{what}: latest version per key kept{', deleted keys removed' if drop_deleted else ''} (one commit)"


# ---- helpers ------------------------------------------------------------------------------------
def _history_keys(cur: TableSchema, ref: TableRef, what: str) -> list[str]:
    if not cur.is_history_mode:
        raise SchemaMismatch(f"{what}: table {ref.display} is not in history mode ({START} is not in its primary key)")
    for c in (END, ACTIVE):
        if not cur.has(c):
            raise SchemaMismatch(f"{what}: table {ref.display} has no {c} column")
    keys = [k for k in cur.primary_keys if k != START]
    if not keys:
        raise SchemaMismatch(f"{what}: table {ref.display} has no key besides {START}")
    return keys


def _param_name(cur: TableSchema) -> str:
    taken = {n.lower() for n in cur.column_names}
    while True:
        name = f"fivetran_param_{uuid.uuid4().hex[:8]}"
        if name not in taken:
            return name


def clean_leftovers(warehouse: str) -> None:
    """At start-up no migration runs: remove what a crash left (dropped tables in the trash,
    hidden half-written copies)."""
    if is_url(warehouse) or not os.path.isdir(warehouse):
        return
    shutil.rmtree(os.path.join(warehouse, TRASH_DIR), ignore_errors=True)
    for path in glob.glob(os.path.join(glob.escape(warehouse), "*", TMP_PREFIX + "*")):
        shutil.rmtree(path, ignore_errors=True)


def _clean_stale_tmp(parent: str) -> None:
    """Hidden copies left by a crash are removed after a day (a running copy is much younger)."""
    cutoff = time.time() - STALE_TMP_SECONDS
    for path in glob.glob(os.path.join(glob.escape(parent), TMP_PREFIX + "*")):
        try:
            if os.path.getmtime(path) < cutoff:
                shutil.rmtree(path, ignore_errors=True)
        except OSError:
            pass
