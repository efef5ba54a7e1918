"""Column migrations on live tables: rename, copy, add with a default, update a value."""
from __future__ import annotations

import pyarrow as pa

from ...errors import SchemaMismatch
from ...names import check_column_name
from ...settings import Settings
from ..notices import notice
from ..sql import add_column_select_sql, copy_column_sql, renamed_select_sql
from ..types import same_storage, type_label
from .common import MigrationFamily, new_column, param_name, parse_value
from .operations import SUCCESS, AddColumnWithDefaultValue, CopyColumn, MigrationDetails, RenameColumn, UpdateColumnValue


class ColumnMigrations(MigrationFamily):
    def rename_column(self, settings: Settings, d: MigrationDetails, op: RenameColumn):
        with self.registry.opened(settings, d.schema, d.table) as t:
            ref, cur, eng = t.ref, t.table, t.eng
            if op.from_column == op.to_column:
                return SUCCESS, "rename_column: same name, nothing to do"
            old, new = cur.get(op.from_column), cur.get(op.to_column)
            if old is None and new is not None:
                self.registry.tidy_metadata(eng, ref, cur)
                return SUCCESS, f"rename_column: {op.from_column!r} is already renamed to {op.to_column!r} (replay)"
            if old is None:
                raise SchemaMismatch(f"rename_column: column {op.from_column!r} does not exist in {ref.display}")
            if new is not None:
                raise SchemaMismatch(f"rename_column: column {op.to_column!r} already exists in {ref.display}")
            check_column_name(op.to_column)
            target = cur.with_columns(c.with_(name=op.to_column) if c.name == op.from_column else c for c in cur.columns)

            # Delta refuses a rename to another case of the same name in place (FIELD_ALREADY_EXISTS).
            upgrade = (self.tables.mapping_engine(t, lambda e: e.renames_in_place(ref.location, op.from_column,
                                                                                  op.to_column))
                       if op.from_column.casefold() != op.to_column.casefold() else None)
            eng = t.eng
            if upgrade is not None:
                self.tables.change_columns(eng, ref, cur, target, lambda: eng.rename_column(
                    ref.location, op.from_column, op.to_column), before=upgrade)
                how = ("metadata only, the data files untouched"
                       + (" (column mapping turned on first)" if upgrade else "") + f"; {t.served_by}")
            else:
                select = renamed_select_sql(eng.table_name(ref.location),
                                            [(c.name, t.name) for c, t in zip(cur.columns, target.columns)])
                self.tables.rewrite_table(eng, ref, cur, target, select)
                how = "table rewritten in one commit"
        return SUCCESS, f"rename_column: {op.from_column!r} renamed to {op.to_column!r} ({how})"

    def copy_column(self, settings: Settings, d: MigrationDetails, op: CopyColumn):
        ref = self.registry.locate(settings, d.schema, d.table)
        with self.registry.session(settings) as eng, self.registry.locked(ref):
            cur = self.registry.require(eng, ref)
            src = cur.get(op.from_column)
            if src is None:
                raise SchemaMismatch(f"copy_column: column {op.from_column!r} does not exist in {ref.display}")
            if op.from_column == op.to_column:
                return SUCCESS, "copy_column: same column, nothing to do"
            existing = cur.get(op.to_column)
            if existing is not None:
                if not same_storage(existing, src):
                    raise SchemaMismatch(f"copy_column: column {op.to_column!r} already exists with another type")
                sql = copy_column_sql(eng.table_name(ref.location), op.from_column, op.to_column)
                eng.execute(f"copy column in {ref.display}", sql)
                return SUCCESS, f"copy_column: {op.to_column!r} exists, values copied where they differed"
            check_column_name(op.to_column)
            target = cur.with_columns(cur.columns + (src.with_(name=op.to_column, primary_key=False),))

            pairs = [(c.name, c.name) for c in cur.columns] + [(src.name, op.to_column)]
            self.tables.rewrite_table(eng, ref, cur, target, renamed_select_sql(eng.table_name(ref.location), pairs))
        return SUCCESS, f"copy_column: {op.from_column!r} copied to new column {op.to_column!r}"

    def add_column_with_default_value(self, settings: Settings, d: MigrationDetails, op: AddColumnWithDefaultValue):
        what = "add_column_with_default_value"
        ref = self.registry.locate(settings, d.schema, d.table)
        new = new_column(op.column, op.column_type)
        with self.registry.session(settings) as eng, self.registry.locked(ref):
            cur = self.registry.require(eng, ref)
            existing = cur.get(new.name)
            if existing is not None:
                # The guide: if the column exists, still set the default on all rows. The
                # table's type wins over the request's.
                value = parse_value(op.default_value, existing, what)
                if not same_storage(existing, new):
                    notice(f"{what} {ref.display}: column {new.name!r} already exists as {type_label(existing)}, "
                           f"not {type_label(new)}; its type was kept and the default set in that type")
                self.set_all_rows(eng, settings, ref, existing, value)
                return SUCCESS, f"{what}: column {new.name!r} exists, default set on every row"
            value = parse_value(op.default_value, new, what)
            target = cur.with_columns(cur.columns + (new,))
            param = param_name(cur)

            with eng.shipped(pa.table({param: value}), ref.warehouse) as view:
                select = add_column_select_sql(eng.table_name(ref.location), view, param, cur.columns, new)
                self.tables.rewrite_table(eng, ref, cur, target, select)
        return SUCCESS, f"{what}: column {new.name!r} added with its default (one commit)"

    def update_column_value(self, settings: Settings, d: MigrationDetails, op: UpdateColumnValue):
        ref = self.registry.locate(settings, d.schema, d.table)
        with self.registry.session(settings) as eng, self.registry.locked(ref):
            cur = self.registry.require(eng, ref)
            col = cur.get(op.column)
            if col is None:
                raise SchemaMismatch(f"update_column_value: column {op.column!r} does not exist in {ref.display}")
            value = parse_value(op.value, col, "update_column_value")
            self.set_all_rows(eng, settings, ref, col, value)
        return SUCCESS, f"update_column_value: column {op.column!r} set to {'NULL' if value.null_count else 'the value'} on every row"
