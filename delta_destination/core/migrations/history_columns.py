"""History-mode column migrations: add and drop a column while keeping history (active
versions closed at operation_timestamp - 1 ms, new versions from operation_timestamp)."""
from __future__ import annotations

import pyarrow as pa

from ...engines.dialect import EngineSession
from ...engines.errors import run_engine
from ...settings import Settings
from ..catalog import TableRef
from ..errors import InvalidRequest, SchemaMismatch
from ..history import MAX_END_US, ONE_MS
from ..model import ACTIVE, END, START, Column, TableSchema
from ..names import quote_ident
from ..sql import active_after_sql
from ..types import arrow_type, same_storage, spark_type
from .common import (HISTORY_COLUMNS, MigrationFamily, history_keys_for, new_column, parse_timestamp_us, parse_value,
                     ts_array, utc_us_literal)
from .operations import SUCCESS, AddColumnInHistoryMode, DropColumnInHistoryMode, MigrationDetails


class HistoryColumnMigrations(MigrationFamily):
    def add_column_in_history_mode(self, settings: Settings, d: MigrationDetails, op: AddColumnInHistoryMode):
        what = "add_column_in_history_mode"
        ref = self.catalog.locate(settings, d.schema, d.table)
        new = new_column(op.column, op.column_type)
        ts = parse_timestamp_us(op.operation_timestamp, what)
        eng = self.catalog.session(settings)
        with self.catalog.locked(ref):
            cur = self.catalog.require(eng, ref)
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
        sql = active_after_sql(self.catalog.sql_name(eng, ref), START, ACTIVE, utc_us_literal(ts))
        n = run_engine(f"check the versions of {ref.display}", lambda: eng.spark.sql(sql).collect())[0][0]
        if n:
            raise InvalidRequest(
                f"{what} {ref.display}: {n} active version(s) start after the operation timestamp; the "
                f"guide requires max(_fivetran_start) of active rows <= operation_timestamp. The table is unchanged")

    def history_add_rewrite(self, eng: EngineSession, settings: Settings, ref: TableRef, cur: TableSchema, table: TableSchema,
                            keys: list[str], new: Column, value: pa.Array, ts: int) -> None:
        """The whole table with `new` added, as _history_versions would leave it after adding the
        column: active versions that started before ts are closed at ts - 1 ms and continued by a
        copy starting at ts holding the value; versions starting at ts get the value in place."""
        spark = eng.spark
        ident = self.catalog.sql_name(eng, ref)
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
        params = pa.table({"ts": ts_array(ts), "te": ts_array(ts - ONE_MS), "mx": ts_array(MAX_END_US), "v": value})
        with eng.dialect.shipped(eng.spark, self.catalog.warehouse(settings), params) as view:
            sql = (
                f"SELECT {row(False)} FROM {ident} h CROSS JOIN {view} p "
                f"UNION ALL SELECT {row(True)} FROM {ident} h CROSS JOIN {view} p "
                f"LEFT ANTI JOIN (SELECT {', '.join('y.' + q(k) for k in keys)} FROM {ident} y CROSS JOIN {view} p2 "
                f"WHERE y.{s_} = p2.ts) x ON {taken_on} WHERE {open_before}"
            )
            self.tables.rewrite_table(eng, ref, cur, table, lambda: spark.sql(sql))

    def drop_column_in_history_mode(self, settings: Settings, d: MigrationDetails, op: DropColumnInHistoryMode):
        what = "drop_column_in_history_mode"
        ref = self.catalog.locate(settings, d.schema, d.table)
        ts = parse_timestamp_us(op.operation_timestamp, what)
        eng = self.catalog.session(settings)
        with self.catalog.locked(ref):
            cur = self.catalog.require(eng, ref)
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
        """One MERGE recording `col := value` as of `ts` (the guide's INSERT + UPDATE steps):
        - an active version that started before ts and whose value differs is closed
          (_fivetran_active = false, _fivetran_end = ts - 1 ms) and a copy starting at ts,
          active until the maximum timestamp, gets the value (_fivetran_synced is kept);
        - versions starting exactly at ts get the value in place, so several migrations with
          the same operation_timestamp (or a replay) record history once;
        - an active version starting after ts is refused before (refuse_versions_after); the
          in-place branch for it only matters for a table changed between that check and here.
        Historical versions are never touched; for an added column they keep NULL."""
        ident = self.catalog.sql_name(eng, ref)
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
        params = pa.table({"ts": ts_array(ts), "te": ts_array(ts - ONE_MS), "mx": ts_array(MAX_END_US), "v": value})
        self.run_merge(eng, settings, ref, params, sql)
