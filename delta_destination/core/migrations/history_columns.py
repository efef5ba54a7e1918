"""History-mode column migrations: add and drop a column while keeping history (active
versions closed at operation_timestamp - 1 ms, new versions from operation_timestamp)."""
from __future__ import annotations

import pyarrow as pa

from ...engines.router import EngineSession
from ...errors import InvalidRequest, SchemaMismatch
from ...settings import Settings
from ..registry import TableRef
from ..history import MAX_END_US, ONE_MS
from ..model import ACTIVE, START, Column, TableSchema
from ..sql import active_after_sql, history_add_column_select_sql, history_set_column_merge_sql
from ..types import arrow_type, same_storage
from .common import (HISTORY_COLUMNS, MigrationFamily, history_keys_for, new_column, parse_timestamp_us, parse_value,
                     ts_array, utc_us_literal)
from .operations import SUCCESS, AddColumnInHistoryMode, DropColumnInHistoryMode, MigrationDetails


class HistoryColumnMigrations(MigrationFamily):
    def add_column_in_history_mode(self, settings: Settings, d: MigrationDetails, op: AddColumnInHistoryMode):
        what = "add_column_in_history_mode"
        ref = self.registry.locate(settings, d.schema, d.table)
        new = new_column(op.column, op.column_type)
        ts = parse_timestamp_us(op.operation_timestamp, what)
        with self.registry.session(settings) as eng, self.registry.locked(ref):
            cur = self.registry.require(eng, ref)
            keys = history_keys_for(cur, ref, what)
            self.refuse_versions_after(eng, ref, ts, what)
            existing = cur.get(new.name)
            if existing is None:
                # A new column: schema and versions in ONE overwrite commit, so a crash leaves the
                # table before or after (adding the column, then a MERGE, left NULL-only versions).
                table = cur.with_columns(cur.columns + (new,))
                value = parse_value(op.default_value, new, what)
                self.history_add_rewrite(eng, settings, ref, cur, table, keys, new, value, ts)
                return SUCCESS, f"{what}: column {new.name!r} added and active versions recorded (one commit)"
            if not same_storage(existing, new):
                raise SchemaMismatch(f"{what}: column {new.name!r} already exists with another type")
            value = parse_value(op.default_value, existing, what)
            self.history_versions(eng, settings, ref, cur, keys, existing, value, ts, adding=True)
        return SUCCESS, f"{what}: column {new.name!r} exists; active versions recorded"

    def refuse_versions_after(self, eng: EngineSession, ref: TableRef, ts: int, what: str) -> None:
        """The guide requires max(_fivetran_start) of the active versions <= operation_timestamp
        (an empty table passes): a later active version would be history out of order."""
        sql = active_after_sql(eng.table_name(ref.location), START, ACTIVE, utc_us_literal(ts))
        n = eng.rows(f"check the versions of {ref.display}", sql)[0][0]
        if n:
            raise InvalidRequest(
                f"{what} {ref.display}: {n} active version(s) start after the operation timestamp; the "
                f"guide requires max(_fivetran_start) of active rows <= operation_timestamp. The table is unchanged")

    def history_add_rewrite(self, eng: EngineSession, settings: Settings, ref: TableRef, cur: TableSchema, table: TableSchema,
                            keys: list[str], new: Column, value: pa.Array, ts: int) -> None:
        """The whole table with `new` added, as history_versions would leave it after adding the
        column (sql.history_add_column_select_sql), in ONE overwrite commit."""
        params = pa.table({"ts": ts_array(ts), "te": ts_array(ts - ONE_MS), "mx": ts_array(MAX_END_US), "v": value})
        with eng.shipped(params, ref.warehouse) as view:
            select = history_add_column_select_sql(eng.table_name(ref.location), view, table, keys, new)
            self.tables.rewrite_table(eng, ref, cur, table, select)

    def drop_column_in_history_mode(self, settings: Settings, d: MigrationDetails, op: DropColumnInHistoryMode):
        what = "drop_column_in_history_mode"
        ref = self.registry.locate(settings, d.schema, d.table)
        ts = parse_timestamp_us(op.operation_timestamp, what)
        with self.registry.session(settings) as eng, self.registry.locked(ref):
            cur = self.registry.require(eng, ref)
            keys = history_keys_for(cur, ref, what)
            col = cur.get(op.column)
            if col is None:
                return SUCCESS, f"{what}: column {op.column!r} does not exist, nothing to do"
            if col.name in keys or col.name in HISTORY_COLUMNS:
                raise InvalidRequest(f"{what}: column {op.column!r} is a key or history column")
            self.refuse_versions_after(eng, ref, ts, what)
            # In history mode the column stays in the schema; the new versions hold NULL.
            self.history_versions(eng, settings, ref, cur, keys, col, pa.nulls(1, arrow_type(col)), ts, adding=False)
        return SUCCESS, f"{what}: column {op.column!r} kept, new versions without its value"

    def history_versions(self, eng: EngineSession, settings: Settings, ref: TableRef, table: TableSchema, keys: list[str],
                         col: Column, value: pa.Array, ts: int, adding: bool) -> None:
        """One MERGE recording `col := value` as of `ts` (sql.history_set_column_merge_sql: the
        guide's INSERT + UPDATE steps, historical versions never touched)."""
        sql = history_set_column_merge_sql(eng.table_name(ref.location), "{view}", table, keys, col, adding)
        params = pa.table({"ts": ts_array(ts), "te": ts_array(ts - ONE_MS), "mx": ts_array(MAX_END_US), "v": value})
        self.run_merge(eng, settings, ref, params, sql)
