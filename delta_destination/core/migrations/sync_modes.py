"""Table sync-mode migrations: SOFT_DELETE_TO_HISTORY and HISTORY_TO_SOFT_DELETE (the LIVE_*
modes are not offered to partners yet: unsupported)."""
from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Optional

import pyarrow as pa

from ...engines.router import EngineSession
from ...errors import SchemaMismatch
from ...names import check_column_name
from ...settings import Settings
from ..history import MAX_END_US
from ..model import ACTIVE, DELETED, END, START, SYNCED, Column, DataType, TableSchema
from ..sql import latest_versions_select_sql, max_sql, to_history_select_sql
from .common import EPOCH_US, HISTORY_COLUMNS, MigrationFamily, history_keys_for, now_ms_us, ts_array
from .operations import SUCCESS, UNSUPPORTED, MigrationDetails, SyncModeMigration, TableSyncModeMigration


@dataclass(frozen=True)
class HistoryConversion:
    """A live table's rows as history versions: the new columns, the parameters to ship (one
    row) and the query over the shipped view (`select(view)`)."""

    target: TableSchema
    params: pa.Table
    kept: tuple[Column, ...]
    soft: Optional[str]
    how: str

    def select(self, source: str, view: str) -> str:
        return to_history_select_sql(source, view, self.kept, self.soft)


def to_history(eng: EngineSession, location: str, cur: TableSchema, soft: Optional[str], live: bool) -> HistoryConversion:
    """The guide's SOFT_DELETE_TO_HISTORY (LIVE_TO_HISTORY when `live`):
    rows not soft-deleted: _fivetran_start = MAX(_fivetran_synced) of the table (NOW() for a
    live table, or when there is no synced value), _fivetran_end = 9999-12-31T23:59:59.999Z,
    _fivetran_active = true; soft-deleted rows: start = end = 1970-01-01 (the guide's
    minTimestamp), active = false. _fivetran_start joins the primary key.
    `_fivetran_deleted` is dropped (it has no meaning in history mode); another soft-delete
    column is source data and is kept (as the guide's SOFT_DELETE_TO_LIVE does)."""
    for c in HISTORY_COLUMNS:
        if cur.has(c):
            raise SchemaMismatch(f"table {cur.name!r} already has the history column {c} but is not in history mode")
    soft_col = cur.get(soft) if soft else None
    if soft_col is not None and soft_col.type != DataType.BOOLEAN:
        raise SchemaMismatch(f"soft-delete column {soft!r} is not BOOLEAN")
    use_soft = soft_col is not None and not live
    drop_soft = soft_col is not None and soft_col.name == DELETED
    kept = tuple(c for c in cur.columns if not (drop_soft and c.name == DELETED))
    target = cur.with_columns(kept + (
        Column(START, DataType.UTC_DATETIME, primary_key=True),
        Column(END, DataType.UTC_DATETIME),
        Column(ACTIVE, DataType.BOOLEAN),
    ))
    start_us = None
    if not live and cur.has(SYNCED):
        got = eng.arrow("read the latest _fivetran_synced", max_sql(eng.table_name(location), SYNCED))
        start_us = got.column(0).cast(pa.timestamp("us", tz="UTC")).cast(pa.int64())[0].as_py() if got.num_rows else None
    how = "start = latest _fivetran_synced" if start_us is not None else "start = now"
    if start_us is None:
        start_us = now_ms_us()
    params = pa.table({"st": ts_array(start_us), "ep": ts_array(EPOCH_US), "mx": ts_array(MAX_END_US)})
    how += "; soft-deleted rows inactive" if use_soft else "; all rows active"
    return HistoryConversion(target, params, kept, soft_col.name if use_soft else None, how)


class SyncModeMigrations(MigrationFamily):
    def table_sync_mode_migration(self, settings: Settings, d: MigrationDetails, op: TableSyncModeMigration):
        if op.type == SyncModeMigration.SOFT_DELETE_TO_HISTORY:
            return self._soft_delete_to_history(settings, d, op)
        if op.type == SyncModeMigration.HISTORY_TO_SOFT_DELETE:
            return self._history_to_soft_delete(settings, d, op)
        # SEMANTICS.md: the LIVE_* modes are not offered to partners yet.
        self.registry.locate(settings, d.schema, d.table)
        return UNSUPPORTED, f"{op.type.name} is not supported (live mode is not offered to partners yet)"

    def _soft_delete_to_history(self, settings: Settings, d: MigrationDetails, op: TableSyncModeMigration):
        ref = self.registry.locate(settings, d.schema, d.table)
        soft = op.soft_deleted_column or DELETED
        with self.registry.session(settings) as eng, self.registry.locked(ref):
            cur = self.registry.require(eng, ref)
            if cur.is_history_mode:
                self.registry.tidy_metadata(eng, ref, cur)
                return SUCCESS, "SOFT_DELETE_TO_HISTORY: already in history mode (replay)"
            conv = to_history(eng, ref.location, cur, soft, live=False)
            with eng.shipped(conv.params, ref.warehouse) as view:
                self.tables.rewrite_table(eng, ref, cur, conv.target, conv.select(eng.table_name(ref.location), view))
        return SUCCESS, f"SOFT_DELETE_TO_HISTORY: {conv.how} (one commit)"

    def _history_to_soft_delete(self, settings: Settings, d: MigrationDetails, op: TableSyncModeMigration):
        """The guide's HISTORY_TO_SOFT_DELETE: keep each key's latest version (greatest
        _fivetran_start), soft-deleted column := NOT _fivetran_active (added as BOOLEAN when
        missing), drop _fivetran_start/_end/_active and take _fivetran_start out of the key.
        keep_deleted_rows is honoured only when explicitly false (then keys whose latest version
        is inactive are removed); soft-delete mode otherwise keeps deleted rows, flagged."""
        what = "HISTORY_TO_SOFT_DELETE"
        ref = self.registry.locate(settings, d.schema, d.table)
        soft = op.soft_deleted_column or DELETED
        check_column_name(soft)
        with self.registry.session(settings) as eng, self.registry.locked(ref):
            cur = self.registry.require(eng, ref)
            if not cur.is_history_mode:
                if cur.has(soft):
                    self.registry.tidy_metadata(eng, ref, cur)
                    return SUCCESS, f"{what}: already in soft-delete mode (replay)"
                raise SchemaMismatch(f"{what}: table {ref.display} is not in history mode")
            keys = history_keys_for(cur, ref, what)
            existing = cur.get(soft)
            if existing is not None and existing.type != DataType.BOOLEAN:
                raise SchemaMismatch(f"{what}: soft-delete column {soft!r} is not BOOLEAN")
            kept = [c for c in cur.columns if c.name not in HISTORY_COLUMNS]
            if existing is None:
                kept.append(Column(soft, DataType.BOOLEAN))
            target = cur.with_columns(kept)
            drop_deleted = op.keep_deleted_rows is False
            rn = f"fivetran_rn_{uuid.uuid4().hex[:8]}"

            select = latest_versions_select_sql(eng.table_name(ref.location), keys, target.column_names, soft,
                                               drop_deleted, rn)
            self.tables.rewrite_table(eng, ref, cur, target, select)
        return SUCCESS, f"{what}: latest version per key kept{', deleted keys removed' if drop_deleted else ''} (one commit)"
