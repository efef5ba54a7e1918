"""Table sync-mode migrations: SOFT_DELETE_TO_HISTORY and HISTORY_TO_SOFT_DELETE (the LIVE_*
modes are not offered to partners yet: unsupported)."""
from __future__ import annotations

import uuid
from typing import Optional

import pyarrow as pa

from ...engines.dialect import EngineSession
from ...engines.errors import run_engine
from ...settings import Settings
from ..errors import SchemaMismatch
from ..history import MAX_END_US
from ..model import ACTIVE, DELETED, END, START, SYNCED, Column, DataType, TableSchema
from ..names import check_column_name, quote_ident
from .common import EPOCH_US, HISTORY_COLUMNS, MigrationFamily, history_keys_for, now_ms_us, read_table, ts_array
from .operations import SUCCESS, UNSUPPORTED, MigrationDetails, SyncModeMigration, TableSyncModeMigration


def to_history(eng: EngineSession, location: str, cur: TableSchema, soft: Optional[str], live: bool):
    """The guide's SOFT_DELETE_TO_HISTORY (LIVE_TO_HISTORY when `live`):
    rows not soft-deleted: _fivetran_start = MAX(_fivetran_synced) of the table (NOW() for a
    live table, or when there is no synced value), _fivetran_end = 9999-12-31T23:59:59.999Z,
    _fivetran_active = true; soft-deleted rows: start = end = 1970-01-01 (the guide's
    minTimestamp), active = false. _fivetran_start joins the primary key.
    `_fivetran_deleted` is dropped (it has no meaning in history mode); another soft-delete
    column is source data and is kept (as the guide's SOFT_DELETE_TO_LIVE does)."""
    from pyspark.sql import functions as F

    spark = eng.spark
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
        got = run_engine("read the latest _fivetran_synced", lambda: read_table(eng, location)
                         .agg(F.max(F.col(quote_ident(SYNCED))).alias("m")).toArrow())
        m = got.column(0).cast(pa.timestamp("us", tz="UTC")).cast(pa.int64())[0].as_py() if got.num_rows else None
        start_us = m
    how = "start = latest _fivetran_synced" if start_us is not None else "start = now"
    if start_us is None:
        start_us = now_ms_us()
    names = {p: f"{p}_{uuid.uuid4().hex[:8]}" for p in ("st", "ep", "mx")}
    params = pa.table({names["st"]: ts_array(start_us), names["ep"]: ts_array(EPOCH_US), names["mx"]: ts_array(MAX_END_US)})

    def make_df():
        base = read_table(eng, location)
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


class SyncModeMigrations(MigrationFamily):
    def table_sync_mode_migration(self, settings: Settings, d: MigrationDetails, op: TableSyncModeMigration):
        if op.type == SyncModeMigration.SOFT_DELETE_TO_HISTORY:
            return self._soft_delete_to_history(settings, d, op)
        if op.type == SyncModeMigration.HISTORY_TO_SOFT_DELETE:
            return self._history_to_soft_delete(settings, d, op)
        # SEMANTICS.md: the LIVE_* modes are not offered to partners yet.
        self.catalog.locate(settings, d.schema, d.table)
        return UNSUPPORTED, f"{op.type.name} is not supported (live mode is not offered to partners yet)"

    def _soft_delete_to_history(self, settings: Settings, d: MigrationDetails, op: TableSyncModeMigration):
        ref = self.catalog.locate(settings, d.schema, d.table)
        soft = op.soft_deleted_column or DELETED
        eng = self.catalog.session(settings)
        with self.catalog.locked(ref):
            cur = self.catalog.require(eng, ref)
            if cur.is_history_mode:
                self.catalog.tidy_metadata(eng, ref, cur)
                return SUCCESS, "SOFT_DELETE_TO_HISTORY: already in history mode (replay)"
            target, make_df, how = to_history(eng, ref.location, cur, soft, live=False)
            self.tables.rewrite_table(eng, ref, cur, target, make_df)
        return SUCCESS, f"SOFT_DELETE_TO_HISTORY: {how} (one commit)"

    def _history_to_soft_delete(self, settings: Settings, d: MigrationDetails, op: TableSyncModeMigration):
        """The guide's HISTORY_TO_SOFT_DELETE: keep each key's latest version (greatest
        _fivetran_start), soft-deleted column := NOT _fivetran_active (added as BOOLEAN when
        missing), drop _fivetran_start/_end/_active and take _fivetran_start out of the key.
        keep_deleted_rows is honoured only when explicitly false (then keys whose latest version
        is inactive are removed); soft-delete mode otherwise keeps deleted rows, flagged."""
        from pyspark.sql import Window, functions as F

        what = "HISTORY_TO_SOFT_DELETE"
        ref = self.catalog.locate(settings, d.schema, d.table)
        soft = op.soft_deleted_column or DELETED
        check_column_name(soft)
        eng = self.catalog.session(settings)
        with self.catalog.locked(ref):
            cur = self.catalog.require(eng, ref)
            if not cur.is_history_mode:
                if cur.has(soft):
                    self.catalog.tidy_metadata(eng, ref, cur)
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

            def make_df():
                base = read_table(eng, ref.location)
                w = Window.partitionBy(*[F.col(quote_ident(k)) for k in keys]).orderBy(F.col(quote_ident(START)).desc())
                latest = base.withColumn(rn, F.row_number().over(w)).where(F.col(rn) == 1)
                if drop_deleted:
                    latest = latest.where(F.col(quote_ident(ACTIVE)) == F.lit(True))
                deleted = F.coalesce(~F.col(quote_ident(ACTIVE)), F.lit(False))
                return latest.select(*[deleted.alias(c.name) if c.name == soft else F.col(quote_ident(c.name)) for c in target.columns])

            self.tables.rewrite_table(eng, ref, cur, target, make_df)
        return SUCCESS, f"{what}: latest version per key kept{', deleted keys removed' if drop_deleted else ''} (one commit)"
