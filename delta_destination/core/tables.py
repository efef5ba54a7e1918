"""Table definitions: create, alter, truncate (describing is the registry's: registry.py).

Each is one Delta commit where the data changes (a type change or a dropped column is
one overwrite commit), plus the metadata property commit. Where the engine can change a
table's columns in place, it does so in the log only, without rewriting a data file: a
dropped column or a renamed one (Apache Spark + Delta on a table with column mapping, turned on
at the first such change under the `column_changes` setting `in_place`: core/column_mapping.py),
and type changes that Delta widens (type widening, likewise); auto hands such a request to Spark
(docs/column-changes.md).
"""
from __future__ import annotations

from datetime import datetime, timezone
from typing import Callable, Optional

from .. import logs
from ..engines.router import EngineSession, column_change_choice, delta_widens
from ..errors import EngineError, EngineUnavailable, InvalidRequest, SchemaMismatch, TableAlreadyExists
from ..names import case_clash, check_column_name
from ..settings import ICEBERG_OFF, IN_PLACE, Settings
from . import metadata
from .column_mapping import mapping_upgrade, wants_engine_that_maps
from .delta_log import PropertyWatch, TableSnapshot
from .iceberg.promotions import iceberg_reads_widened
from .registry import TableRegistry, OpenTable, TableRef
from .model import Column, DataType, TableSchema
from .notices import notice
from .table_dirs import remove_failed_create
from .sql import (altered_values_sql, any_row_sql, column_defs, delete_outside_sql, recast_select_sql, rewrite_select_sql,
                  truncate_sql)
from .types import same_storage, spark_type, validate_decimal, value_check

log = logs.get(__name__)

# Table settings type widening needs (Delta's own names).
TYPE_WIDENING = "delta.enableTypeWidening"
TIMESTAMP_NTZ_FEATURE = "delta.feature.timestampNtz"


def validate_columns(schema: TableSchema) -> None:
    if not schema.columns:
        raise InvalidRequest(f"table {schema.name!r} has no columns")
    for c in schema.columns:
        check_column_name(c.name)
        validate_decimal(c)
    clash = case_clash(c.name for c in schema.columns)
    if clash is not None:
        a, b = clash
        if a == b:
            raise InvalidRequest(f"table {schema.name!r}: duplicate column {a!r}")
        # Spark and Delta resolve column names case-insensitively: their values would mix.
        raise InvalidRequest(f"table {schema.name!r}: columns {a!r} and {b!r} differ only in case, which Delta "
                             f"tables cannot hold apart; rename one of them")


def widens_in_place(snapshot: Optional[TableSnapshot], column_changes: str = IN_PLACE) -> bool:
    """Are this table's type changes that Delta widens made in its log only? The table's own Delta
    setting `delta.enableTypeWidening` decides where it is set ('true' or 'false'); else the
    `column_changes` setting: `in_place` (the default) turns type widening on at the first widening,
    `rewrite` keeps the table's protocol. A widened table carries the `typeWidening` reader feature,
    which delta-rs 1.6.6 (and pandas and Polars reading through it) refuses to read at all, while a
    rewrite keeps the table readable by every reader (docs/column-changes.md). None (no snapshot:
    the destination cannot read the log) rewrites.
    >>> import pyarrow as pa
    >>> snap = lambda conf: TableSnapshot(1, conf, {}, pa.table({}))
    >>> widens_in_place(snap({TYPE_WIDENING: "true"}), "rewrite"), widens_in_place(snap({})), widens_in_place(None)
    (True, True, False)
    >>> widens_in_place(snap({}), "rewrite"), widens_in_place(snap({TYPE_WIDENING: "false"}))
    (False, False)
    """
    if snapshot is None:
        return False
    own = snapshot.configuration.get(TYPE_WIDENING)
    if own is not None:
        return own == "true"
    return column_changes == IN_PLACE


def equivalent(a: TableSchema, b: TableSchema) -> bool:
    if [c.name for c in a.columns] != [c.name for c in b.columns]:
        return False
    return all(same_storage(x, y) and x.primary_key == y.primary_key for x, y in zip(a.columns, b.columns))


def utc_ms_literal(ts: datetime) -> str:
    """Millisecond precision, as the SDK specifies for utc_delete_before."""
    ts = ts.astimezone(timezone.utc)
    return ts.strftime("%Y-%m-%dT%H:%M:%S") + f".{ts.microsecond // 1000:03d}Z"


class Tables:
    """create / alter / truncate on the registry's tables."""

    def __init__(self, registry: TableRegistry):
        self.registry = registry

    # ---- create ----------------------------------------------------------------------------
    def create(self, settings: Settings, schema_name: str, schema: TableSchema) -> None:
        validate_columns(schema)
        reg = self.registry
        with reg.opened(settings, schema_name, schema.name, "CreateTable", require=False) as t:
            t.outcome.columns = schema.columns
            if t.table is not None:
                if equivalent(t.table, schema):
                    reg.catalogs.register(settings, schema_name, schema.name, t.ref.location)
                    log.info(f"CreateTable {t.display}: already exists with the same columns (replay)")
                    return
                raise TableAlreadyExists(f"table {t.display} already exists with different columns")
            reg.check_new_name(settings, t.ref)
            reg.catalogs.check(settings, schema_name, schema.name)
            remove_failed_create(t.warehouse, t.ref.location)
            reg.forget(t.ref)
            props = {**t.eng.creation_properties(), **metadata.table_properties(schema, 1)}
            t.eng.create_table(t.ref.location, column_defs(schema.columns), props)
            reg.remember_created(t.ref, schema)
            reg.catalogs.register(settings, schema_name, schema.name, t.ref.location)
            t.outcome.committed, t.outcome.lifecycle = True, "CREATE"
            log.info(f"CreateTable {t.display}: created with {len(schema.columns)} columns")

    # ---- alter -----------------------------------------------------------------------------
    def alter(self, settings: Settings, schema_name: str, desired: TableSchema, drop_columns: bool) -> str:
        """Returns a short summary of what changed."""
        validate_columns(desired)
        reg = self.registry
        with reg.opened(settings, schema_name, desired.name, "AlterTable") as t:
            current, eng, ref = t.table, t.eng, t.ref
            want = {c.name: c for c in desired.columns}
            final: list[Column] = []
            changed: list[str] = []
            dropped: list[str] = []
            for c in current.columns:
                d = want.get(c.name)
                if d is None:
                    if drop_columns:
                        dropped.append(c.name)
                        continue
                    final.append(c.with_(primary_key=False))  # kept, but the request's key set is authoritative
                    continue
                if not same_storage(c, d):
                    changed.append(c.name)
                final.append(d)
            have = {c.name for c in current.columns}
            added = [c for c in desired.columns if c.name not in have]
            final += added
            target = TableSchema(current.name, tuple(final))
            validate_columns(target)  # an added "ID" next to a kept "id" would mix their values
            old_key, new_key = current.primary_keys, target.primary_keys
            if old_key != new_key and self._has_rows(t):
                notice(f"AlterTable {ref.display}: the primary key changed from ({', '.join(old_key)}) to "
                       f"({', '.join(new_key)}). Delta tables have no key constraints, so stored rows are not "
                       f"re-keyed: where several of them share a value of the new key, later changes apply to "
                       f"each of them; a re-sync of the table makes the rows unique again")
            widens = (self._widenings(current, target, changed, t.lease.request.iceberg != ICEBERG_OFF)
                      if changed and not dropped and widens_in_place(t.snapshot(), t.lease.request.column_changes)
                      else [])
            if changed:
                eng = self._column_change_engine(t, widens, changed)
            # In place only when the drop is the whole schema change: Delta has no single statement
            # that drops and adds columns, and one request keeps one schema commit (a rewrite).
            upgrade = (self.mapping_engine(t, lambda e: e.drops_in_place(ref.location, dropped))
                       if dropped and not changed and not added else None)
            eng = t.eng
            in_place = upgrade is not None
            if changed and widens and eng.widens_types_in_place:
                self.widen_in_place(eng, ref, current, target, widens, t.snapshot())
                if added:
                    eng.add_columns(ref.location, [(c.name, spark_type(c)) for c in added])
            elif changed or (dropped and not in_place):
                self.rewrite_columns(eng, ref, current, target)
            else:
                if dropped:
                    self.drop_in_place(eng, ref, current, dropped, upgrade or {})
                if added:
                    eng.add_columns(ref.location, [(c.name, spark_type(c)) for c in added])
            if tuple(final) != tuple(current.columns) or reg.stored_metadata(eng, ref) is None:
                reg.set_metadata(eng, ref, target)
                t.outcome.committed, t.outcome.lifecycle = True, "ALTER"
            t.outcome.columns = target.columns
            summary = (f"added {len(added)}, changed type of {len(changed)}"
                       f"{' (widened in place)' if widens and eng.widens_types_in_place else ''}, "
                       f"dropped {len(dropped)} columns")
            log.info(f"AlterTable {ref.display}: {summary}, {t.served_by}")
            return summary

    @staticmethod
    def _widenings(current: TableSchema, target: TableSchema, changed: list[str],
                   iceberg: bool = False) -> list[tuple[str, str]]:
        """(name, new SQL type) of the changed columns when Delta widens every one of them in its log
        (dialect.delta_widens), else none: one request keeps one kind of schema change. With Iceberg
        metadata on, only widenings Iceberg readers read right (core/iceberg/promotions.py)."""
        widened = [(name, spark_type(current.get(name)), spark_type(target.get(name))) for name in changed]
        if all(delta_widens(old, new) and (not iceberg or iceberg_reads_widened(old, new)) for _, old, new in widened):
            return [(name, new) for name, _, new in widened]
        return []

    def _column_change_engine(self, t: OpenTable, widens: list[tuple[str, str]], changed: list[str]) -> EngineSession:
        """The engine for type changes (engines/choice.py column_change_choice): auto hands a widening
        to Apache Spark, and so a rewrite that changes the type of a column Delta widened before:
        Sail 0.7.2's rewrite keeps Delta's type-change record of that column, which then no longer
        ends at its type, and refuses to read the table afterwards. On Sail alone such a change is
        refused (an engine that writes type widening rewrites widened columns right)."""
        widened_before = self._widened_columns(t.snapshot(), changed)
        choice = column_change_choice(t.lease.choice, self.registry.router.spark_available(t.lease.request),
                                      bool(widens), bool(widened_before))
        if choice != t.lease.choice:
            t.lease.move_to(choice)
        if widened_before and not t.eng.widens_types_in_place:
            raise InvalidRequest(
                f"{t.display}: column(s) {', '.join(map(repr, widened_before))} had their type widened in place by "
                f"Apache Spark + Delta, and embedded Sail 0.7.2 cannot rewrite them to another type without leaving "
                f"the table unreadable to itself; run this change with the Apache Spark engine (--engine spark); "
                f"the table is unchanged")
        return t.eng

    def mapping_engine(self, t: OpenTable, mapped: Callable[[EngineSession], bool]) -> Optional[dict[str, str]]:
        """For a rename or drop: the table properties to set before it is made in place ({}: none;
        column mapping at the table's first, core/column_mapping.py), or None: rewrite. Under
        `in_place` auto hands the request to Apache Spark (engines/choice.py column_change_choice,
        reason code `column_mapping`), the one engine with RENAME/DROP COLUMN. `mapped` asks the
        engine whether the table has column mapping, where the destination cannot read its log."""
        column_changes = t.lease.request.column_changes
        if wants_engine_that_maps(column_changes):
            choice = column_change_choice(t.lease.choice, self.registry.router.spark_available(t.lease.request),
                                          False, False, maps_columns=True)
            if choice != t.lease.choice:
                t.lease.move_to(choice)
        snapshot = t.snapshot()
        if snapshot is None:
            return {} if t.eng.maps_columns and mapped(t.eng) else None
        return mapping_upgrade(snapshot.configuration, column_changes, t.eng.maps_columns)

    @staticmethod
    def _widened_columns(snapshot: Optional[TableSnapshot], names: list[str]) -> list[str]:
        """Those of `names` whose type Delta widened before (Delta's type-change record in the log)."""
        if snapshot is None:
            return []
        return [n for n in names if n in snapshot.fields and snapshot.fields[n].widened]

    def widen_in_place(self, eng: EngineSession, ref: TableRef, current: TableSchema, target: TableSchema,
                       widens: list[tuple[str, str]], snapshot: Optional[TableSnapshot]) -> None:
        """Type changes Delta widens, in the log only (a table with type widening on: widens_in_place;
        a DATE becoming TIMESTAMP_NTZ also needs the timestampNtz feature, set first), then each
        column's new type; no data file is added or removed, and the older files are read as the new
        type. The statistics list loses columns that become DECIMAL first (see metadata.stats_properties)."""
        configuration = snapshot.configuration if snapshot is not None else {}
        features = snapshot.features if snapshot is not None else frozenset()
        props = {} if configuration.get(TYPE_WIDENING) == "true" else {TYPE_WIDENING: "true"}
        if any(new == "TIMESTAMP_NTZ" for _, new in widens) and "timestampNtz" not in features:
            props[TIMESTAMP_NTZ_FEATURE] = "supported"
        self.registry.prepare_stats_for(eng, ref, current, target)
        eng.widen_columns(ref.location, widens, props)
        self.registry.schema_changed(eng, ref)

    @staticmethod
    def _has_rows(t: OpenTable) -> bool:
        return bool(t.eng.rows(f"look for rows in {t.display}", any_row_sql(t.sql_name)))

    def rewrite_columns(self, eng: EngineSession, ref: TableRef, current: TableSchema, target: TableSchema) -> None:
        """Type changes and drops: one overwrite commit with the new schema (no type widening on
        Sail). A narrowing change is checked against the stored values first."""
        cur = {c.name: c for c in current.columns}
        changed = [c.name for c in target.columns if c.name in cur and not same_storage(cur[c.name], c)]
        checked = [(c.name, spark_type(cur[c.name]), spark_type(c), value_check(cur[c.name], c))
                   for c in target.columns if c.name in changed]
        checked = [x for x in checked if x[3] != "none"]
        try:
            if checked:
                self._refuse_altered_values(eng, ref, checked)
            self.registry.prepare_stats_for(eng, ref, current, target)
            select = rewrite_select_sql(eng.table_name(ref.location), current, target)
            eng.overwrite(f"rewrite {ref.display}", ref.location, select)
        except EngineError as exc:
            if changed and not isinstance(exc, EngineUnavailable):
                # The rewrite is one commit, so nothing changed. A cast the stored values cannot
                # take (text into INT, a value out of a narrower range) is the usual cause.
                raise InvalidRequest(
                    f"{ref.display}: the stored values of column(s) {', '.join(map(repr, changed))} cannot be "
                    f"converted to the requested type(s); the table is unchanged"
                ) from exc
            raise
        self.registry.schema_changed(eng, ref)

    def drop_in_place(self, eng: EngineSession, ref: TableRef, current: TableSchema, dropped: list[str],
                      upgrade: dict[str, str]) -> None:
        """A metadata-only drop (mapping_engine said the table allows it, after `upgrade`: column
        mapping, set in the same commit as the statistics list the drop needs). As after a rewrite,
        the stored metadata is written after the drop (alter): until then it still lists the
        vanished columns, which describe ignores. The values stay in the data files, no longer
        referenced, until those files are rewritten and vacuumed."""
        kept = TableSchema(current.name, tuple(c for c in current.columns if c.name not in dropped))
        self.registry.set_properties(eng, ref, {**upgrade, **metadata.drop_safe_stats_properties(kept)})
        eng.drop_columns(ref.location, dropped)
        self.registry.schema_changed(eng, ref)

    def rewrite_table(self, eng: EngineSession, ref: TableRef, current: TableSchema, target: TableSchema,
                      select_sql: str) -> None:
        """New schema + data (the query's) in ONE overwrite commit (see change_columns)."""
        self.change_columns(eng, ref, current, target,
                            lambda: eng.overwrite(f"rewrite {ref.display}", ref.location, select_sql))

    def change_columns(self, eng: EngineSession, ref: TableRef, current: TableSchema, target: TableSchema,
                       commit: Callable[[], None], before: Optional[dict[str, str]] = None) -> None:
        """`commit` gives the table `target`'s columns in ONE commit (a rewrite, or a metadata-only
        rename). The metadata property cannot share that commit (Delta's RENAME COLUMN sets no table
        property), so it is written before as a superset (target + columns about to go; describe only
        reads entries of columns the Delta schema has), with `before` (a protocol upgrade the commit
        needs) in the same commit, and tidied after."""
        validate_columns(target)
        reg = self.registry
        removed = tuple(c for c in current.columns if not target.has(c.name))
        kept = TableSchema(target.name, tuple(c for c in target.columns if current.has(c.name)))
        reg.set_metadata(eng, ref, TableSchema(target.name, target.columns + removed), stats_schema=kept,
                         extra=before)
        commit()
        reg.schema_changed(eng, ref)
        if removed:
            reg.set_metadata(eng, ref, target)

    def replace_contents(self, settings: Settings, schema_name: str, target: TableSchema, source_location: str) -> None:
        """The table becomes exactly the rows of the Delta table at `source_location` (same
        column names, the target's types), in one commit: readers see the old rows until then.
        A missing table is created first (empty, then filled)."""
        validate_columns(target)
        reg = self.registry
        ref = reg.locate(settings, schema_name, target.name)
        with reg.session(settings) as eng:
            missing = reg.describe(eng, ref) is None
        if missing:
            self.create(settings, schema_name, target)
        with reg.opened(settings, schema_name, target.name, "ReplaceContents") as t:
            select = recast_select_sql(t.eng.table_name(source_location), target.columns)
            self.rewrite_table(t.eng, t.ref, t.table, target, select)
            t.outcome.committed, t.outcome.lifecycle, t.outcome.columns = True, "OVERWRITE", target.columns
            log.info(f"{t.display}: contents replaced in one commit")

    def _refuse_altered_values(self, eng: EngineSession, ref: TableRef, checked: list[tuple[str, str, str, str]]) -> None:
        """A narrowing type change is done only when no stored value would change beyond what
        the new type means (a DECIMAL scale cut or DOUBLE to INT would otherwise round
        silently; DOUBLE to FLOAT rounds to FLOAT precision by definition, but must not
        overflow)."""
        sql = altered_values_sql(eng.table_name(ref.location), checked)
        row = eng.rows(f"check the values of {ref.display}", sql)[0]
        altered = [name for (name, _, _, _), n in zip(checked, row) if n]
        if altered:
            raise InvalidRequest(
                f"{ref.display}: changing the type of column(s) {', '.join(map(repr, altered))} would alter stored "
                f"values (rounding, truncation or overflow); the table is unchanged")

    # ---- row ranges and door checkpoints -----------------------------------------------------------
    def delete_outside(self, settings: Settings, schema_name: str, table: str, column: str,
                       below: Optional[int] = None, at_or_above: Optional[int] = None) -> bool:
        """Rows whose integer `column` is below `below`, at or above `at_or_above`, or NULL,
        deleted in one commit (e.g. rows of generations older than a refresh keeps). False when
        the table does not exist."""
        with self.registry.opened(settings, schema_name, table, "DeleteRows", require=False) as t:
            if t.table is None:
                return False
            col = t.table.get(column)
            if col is None or col.type not in (DataType.SHORT, DataType.INT, DataType.LONG):
                raise SchemaMismatch(f"{t.display}: column {column!r} does not exist or is not an integer column")
            t.eng.execute(f"delete from {t.display}", delete_outside_sql(t.sql_name, column, below, at_or_above))
            t.outcome.committed = True
            log.info(f"{t.display}: rows outside the kept range of {column} deleted")
            return True

    def set_property(self, settings: Settings, schema_name: str, table: str, key: str, value: str) -> None:
        """A door's own marker kept inside the table (one commit), e.g. how far a sync is durable."""
        with self.registry.opened(settings, schema_name, table) as t:
            t.eng.set_properties(f"set a property of {t.display}", t.ref.location, {key: value})

    def watch_property(self, settings: Settings, schema_name: str, table: str, key: str) -> PropertyWatch:
        """A table property's current value, kept up to date from the table's log without taking
        its lock (a door's commit guard asks it while the writer holds the lock): see PropertyWatch."""
        reg = self.registry
        ref = reg.locate(settings, schema_name, table)

        def ask() -> list[str]:
            with reg.session(settings) as eng:
                return reg.property_values(eng, ref, key)

        return PropertyWatch(ref.warehouse, ref.location, key, ask)

    def property_values(self, settings: Settings, schema_name: str, table: str, key: str) -> list[str]:
        """The values the property has had, the current one last (where only the engine reads the
        log it cannot say which is the latest: a door that needs one stores values that only grow)."""
        reg = self.registry
        ref = reg.locate(settings, schema_name, table)
        with reg.session(settings) as eng, reg.locked(ref):
            return reg.property_values(eng, ref, key)

    # ---- truncate --------------------------------------------------------------------------
    def truncate(self, settings: Settings, schema_name: str, table: str, synced_column: str, before: datetime,
                 soft_deleted_column: Optional[str]) -> bool:
        """Returns False when the table does not exist (which is not an error)."""
        with self.registry.opened(settings, schema_name, table, "Truncate", require=False) as t:
            current = t.table
            if current is None:
                log.info(f"Truncate {t.display}: table does not exist, nothing to do")
                return False
            if current.get(synced_column or "") is None:
                raise SchemaMismatch(f"Truncate {t.display}: synced column {synced_column!r} does not exist")
            if soft_deleted_column is not None:
                deleted = current.get(soft_deleted_column)
                if deleted is None or deleted.type != DataType.BOOLEAN:
                    raise SchemaMismatch(
                        f"Truncate {t.display}: soft-delete column {soft_deleted_column!r} does not exist or is not BOOLEAN")
            sql = truncate_sql(t.sql_name, synced_column, utc_ms_literal(before), soft_deleted_column)
            t.eng.execute(f"truncate {t.display}", sql)
            t.outcome.committed, t.outcome.lifecycle = True, "TRUNCATE"
            log.info(f"Truncate {t.display}: {'soft' if soft_deleted_column is not None else 'hard'} truncate done, "
                     f"{t.served_by}")
            return True
