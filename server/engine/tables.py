"""Table lifecycle on Delta through Spark: locate, create, describe, alter, truncate.

Every table lives at <warehouse>/<schema>/<table>. SQL that needs a table name
(MERGE/UPDATE/DELETE/ALTER) uses a catalog entry registered for that location
under a name derived from the path, because Sail does not accept
delta.`/path` identifiers; Apache Spark + Delta accepts the same statements.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import threading
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Optional

from .. import log
from ..config import Settings, is_url
from ..errors import EngineError, EngineUnavailable, InvalidRequest, SchemaMismatch, TableAlreadyExists, TableNotFound
from ..model import Column, FivetranType, TableSchema
from ..names import check_column_name, check_path_name, quote_ident, quote_string
from ..type_mapping import column_from_spark, same_storage, spark_type, validate_decimal
from . import table_metadata
from .session import SparkSessions
from .spark_errors import run_engine


@dataclass(frozen=True)
class TableRef:
    schema: str
    table: str
    location: str
    ident: str  # catalog identifier registered for `location`

    @property
    def display(self) -> str:
        return f"{self.schema}.{self.table}"


def locate(settings: Settings, schema: str, table: str) -> TableRef:
    check_path_name("schema", schema)
    check_path_name("table", table)
    location = f"{settings.warehouse}/{schema}/{table}" if is_url(settings.warehouse) else os.path.join(settings.warehouse, schema, table)
    digest = hashlib.sha1(location.encode("utf-8")).hexdigest()[:24]
    return TableRef(schema, table, location, f"fivetran_t_{digest}")


def validate_columns(schema: TableSchema) -> None:
    seen = set()
    if not schema.columns:
        raise InvalidRequest(f"table {schema.name!r} has no columns")
    for c in schema.columns:
        check_column_name(c.name)
        if c.name.lower() in seen:  # Spark resolves column names case-insensitively
            raise InvalidRequest(f"duplicate column {c.name!r}")
        seen.add(c.name.lower())
        validate_decimal(c)


class TableLocks:
    """Requests for one table are serialized; different tables run in parallel."""

    def __init__(self):
        self._guard = threading.Lock()
        self._locks: dict[str, threading.Lock] = {}

    def for_location(self, location: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(location, threading.Lock())


class TableEngine:
    def __init__(self, sessions: SparkSessions):
        self.sessions = sessions
        self.locks = TableLocks()
        self._meta_cache: dict[str, table_metadata.StoredMetadata] = {}

    # ---- plumbing -------------------------------------------------------------------------
    def spark(self, settings: Settings):
        return self.sessions.get(settings.spark_remote)

    def exists(self, spark, ref: TableRef) -> bool:
        if not is_url(ref.location):
            log_dir = os.path.join(ref.location, "_delta_log")
            if not os.path.isdir(log_dir):
                return False
            return any(n.endswith(".json") and n[:20].isdigit() for n in os.listdir(log_dir))
        try:
            spark.read.format("delta").load(ref.location).schema
            return True
        except Exception:
            return False

    def register(self, spark, ref: TableRef) -> str:
        """Ensure the catalog entry exists. Issued every time (a catalog no-op when it exists):
        a restarted remote engine has lost its session catalog, and a cache here would not know."""
        run_engine(
            f"register {ref.display}",
            lambda: spark.sql(f"CREATE TABLE IF NOT EXISTS {ref.ident} USING delta LOCATION {quote_string(ref.location)}").collect(),
        )
        return ref.ident

    def unregister(self, spark, ref: TableRef) -> None:
        spark.sql(f"DROP TABLE IF EXISTS {ref.ident}").collect()  # external table: data stays

    def schema_changed(self, spark, ref: TableRef) -> None:
        """Sail's catalog entry keeps the schema it saw when registered, and MERGE casts to it
        (a DECIMAL(38,15) value was cut to the registered scale 10): re-register after every
        schema change."""
        run_engine(f"refresh {ref.display}", lambda: self.unregister(spark, ref))

    def forget(self, ref: TableRef) -> None:
        self._meta_cache.pop(ref.location, None)

    # ---- describe --------------------------------------------------------------------------
    def describe(self, settings: Settings, schema: str, table: str) -> Optional[TableSchema]:
        ref = locate(settings, schema, table)
        spark = self.spark(settings)
        return self.describe_ref(spark, ref)

    def require(self, spark, ref: TableRef) -> TableSchema:
        """The table's schema, or TableNotFound."""
        table = self.describe_ref(spark, ref)
        if table is None:
            raise TableNotFound(f"table {ref.display} does not exist")
        return table

    def describe_ref(self, spark, ref: TableRef) -> Optional[TableSchema]:
        if not self.exists(spark, ref):
            return None
        fields = run_engine(f"describe {ref.display}", lambda: spark.read.format("delta").load(ref.location).schema.fields)
        meta = self._metadata(spark, ref)
        by_name = {c.name: c for c in meta.columns} if meta else {}
        cols = []
        for f in fields:
            inferred = column_from_spark(f.name, f.dataType.simpleString())
            stored = by_name.get(f.name)
            if stored is not None and same_storage(stored, inferred):
                cols.append(stored)
            elif stored is not None:  # type changed outside our metadata: trust the data
                cols.append(inferred.with_(primary_key=stored.primary_key))
            else:
                cols.append(inferred)
        return TableSchema(ref.table, tuple(cols))

    def _metadata(self, spark, ref: TableRef) -> Optional[table_metadata.StoredMetadata]:
        cached = self._meta_cache.get(ref.location)
        if cached is not None:
            return cached
        meta = run_engine(f"read metadata of {ref.display}", lambda: table_metadata.read_latest(spark, ref.location))
        if meta is not None:
            self._meta_cache[ref.location] = meta
        return meta

    def _generation(self, spark, ref: TableRef) -> int:
        meta = self._metadata(spark, ref)
        return meta.generation if meta else 0

    def _set_metadata(self, spark, ref: TableRef, schema: TableSchema) -> None:
        gen = self._generation(spark, ref) + 1
        self._set_properties(spark, ref, table_metadata.table_properties(schema, gen))
        self._meta_cache[ref.location] = table_metadata.StoredMetadata(gen, schema.columns)

    def _set_properties(self, spark, ref: TableRef, props: dict) -> None:
        ident = self.register(spark, ref)
        sql = f"ALTER TABLE {ident} SET TBLPROPERTIES ({table_metadata.properties_sql(props)})"
        run_engine(f"set properties of {ref.display}", lambda: spark.sql(sql).collect())

    def prepare_stats_for(self, spark, ref: TableRef, current: TableSchema, target: TableSchema) -> None:
        """Before data files are rewritten for `target`: no statistics on its DECIMAL columns
        (see table_metadata.stats_properties); only columns that exist now are listed."""
        have = set(current.column_names)
        safe = TableSchema(target.name, tuple(c for c in target.columns if c.name in have))
        props = table_metadata.stats_properties(safe)
        if props != table_metadata.stats_properties(current):  # no commit when nothing changes
            self._set_properties(spark, ref, props)

    # ---- create ----------------------------------------------------------------------------
    def create(self, settings: Settings, schema_name: str, schema: TableSchema) -> None:
        ref = locate(settings, schema_name, schema.name)
        validate_columns(schema)
        spark = self.spark(settings)
        with self.locks.for_location(ref.location):
            existing = self.describe_ref(spark, ref)
            if existing is not None:
                if _equivalent(existing, schema):
                    log.info(f"CreateTable {ref.display}: already exists with the same columns (replay)")
                    return
                raise TableAlreadyExists(f"table {ref.display} already exists with different columns")
            self._clear_failed_create(ref)
            self.unregister(spark, ref)  # a stale catalog entry from a dropped table
            self.forget(ref)
            cols = ", ".join(f"{quote_ident(c.name)} {spark_type(c)}" for c in schema.columns)
            sql = (
                f"CREATE TABLE {ref.ident} ({cols}) USING delta LOCATION {quote_string(ref.location)} "
                f"{table_metadata.tblproperties_clause(schema, 1)}"
            )
            run_engine(f"create {ref.display}", lambda: spark.sql(sql).collect())
            self._meta_cache[ref.location] = table_metadata.StoredMetadata(1, schema.columns)
            log.info(f"CreateTable {ref.display}: created with {len(schema.columns)} columns")

    def _clear_failed_create(self, ref: TableRef) -> None:
        """A crash during CREATE can leave a _delta_log without commits; it holds no data."""
        if is_url(ref.location) or not os.path.isdir(ref.location):
            return
        log_dir = os.path.join(ref.location, "_delta_log")
        has_commit = os.path.isdir(log_dir) and any(n.endswith(".json") for n in os.listdir(log_dir))
        has_data = any(n.endswith(".parquet") for n in os.listdir(ref.location))
        if not has_commit and not has_data:
            shutil.rmtree(ref.location, ignore_errors=True)

    # ---- alter -----------------------------------------------------------------------------
    def alter(self, settings: Settings, schema_name: str, desired: TableSchema, drop_columns: bool) -> str:
        """Returns a short summary of what changed."""
        ref = locate(settings, schema_name, desired.name)
        validate_columns(desired)
        spark = self.spark(settings)
        with self.locks.for_location(ref.location):
            current = self.require(spark, ref)
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
            if changed or dropped:
                self._rewrite(spark, ref, current, target)
            elif added:
                self._add_columns(spark, ref, added)
            if tuple(final) != tuple(current.columns) or self._metadata(spark, ref) is None:
                self._set_metadata(spark, ref, target)
            summary = f"added {len(added)}, changed type of {len(changed)}, dropped {len(dropped)} columns"
            log.info(f"AlterTable {ref.display}: {summary}")
            return summary

    def _add_columns(self, spark, ref: TableRef, added: list[Column]) -> None:
        """Sail has no ALTER TABLE ADD COLUMNS: append zero rows with the new schema (mergeSchema)."""
        from pyspark.sql import functions as F

        def go():
            base = spark.read.format("delta").load(ref.location)
            empty = base.limit(0).select("*", *[F.lit(None).cast(spark_type(c)).alias(c.name) for c in added])
            empty.write.format("delta").mode("append").option("mergeSchema", "true").save(ref.location)

        run_engine(f"add columns to {ref.display}", go)
        self.schema_changed(spark, ref)

    def _rewrite(self, spark, ref: TableRef, current: TableSchema, target: TableSchema) -> None:
        """Type changes and drops: one overwrite commit with the new schema (no type widening on Sail)."""
        from pyspark.sql import functions as F

        cur = {c.name: c for c in current.columns}
        self.prepare_stats_for(spark, ref, current, target)

        def go():
            base = spark.read.format("delta").load(ref.location)
            cols = []
            for c in target.columns:
                if c.name not in cur:
                    cols.append(F.lit(None).cast(spark_type(c)).alias(c.name))
                elif same_storage(cur[c.name], c):
                    cols.append(F.col(quote_ident(c.name)))
                else:
                    cols.append(F.col(quote_ident(c.name)).cast(spark_type(c)).alias(c.name))
            base.select(*cols).write.format("delta").mode("overwrite").option("overwriteSchema", "true").save(ref.location)

        changed = [c.name for c in target.columns if c.name in cur and not same_storage(cur[c.name], c)]
        try:
            run_engine(f"rewrite {ref.display}", go)
        except EngineError as exc:
            if changed and not isinstance(exc, EngineUnavailable):
                # The rewrite is one commit, so nothing changed. A cast the stored values cannot
                # take (text into INT, a value out of a narrower range) is the usual cause.
                raise InvalidRequest(
                    f"{ref.display}: the stored values of column(s) {', '.join(map(repr, changed))} cannot be "
                    f"converted to the requested type(s); the table is unchanged"
                ) from exc
            raise
        self.schema_changed(spark, ref)

    # ---- truncate --------------------------------------------------------------------------
    def truncate(
        self,
        settings: Settings,
        schema_name: str,
        table: str,
        synced_column: str,
        before: datetime,
        soft_deleted_column: Optional[str],
    ) -> bool:
        """Returns False when the table does not exist (which is not an error)."""
        ref = locate(settings, schema_name, table)
        spark = self.spark(settings)
        with self.locks.for_location(ref.location):
            current = self.describe_ref(spark, ref)
            if current is None:
                log.info(f"Truncate {ref.display}: table does not exist, nothing to do")
                return False
            synced = current.get(synced_column or "")
            if synced is None:
                raise SchemaMismatch(f"Truncate {ref.display}: synced column {synced_column!r} does not exist")
            cut = f"CAST({quote_string(_utc_ms_literal(before))} AS TIMESTAMP)"
            ident = self.register(spark, ref)
            if soft_deleted_column is not None:
                deleted = current.get(soft_deleted_column)
                if deleted is None or deleted.type != FivetranType.BOOLEAN:
                    raise SchemaMismatch(
                        f"Truncate {ref.display}: soft-delete column {soft_deleted_column!r} does not exist or is not BOOLEAN"
                    )
                d = quote_ident(soft_deleted_column)
                sql = f"UPDATE {ident} SET {d} = true WHERE {quote_ident(synced_column)} < {cut} AND ({d} IS NULL OR {d} = false)"
            else:
                sql = f"DELETE FROM {ident} WHERE {quote_ident(synced_column)} < {cut}"
            run_engine(f"truncate {ref.display}", lambda: spark.sql(sql).collect())
            log.info(f"Truncate {ref.display}: {'soft' if soft_deleted_column is not None else 'hard'} truncate done")
            return True


def _utc_ms_literal(ts: datetime) -> str:
    """Millisecond precision, as the SDK specifies for utc_delete_before."""
    ts = ts.astimezone(timezone.utc)
    ms = ts.microsecond // 1000
    return ts.strftime("%Y-%m-%dT%H:%M:%S") + f".{ms:03d}Z"


def _equivalent(a: TableSchema, b: TableSchema) -> bool:
    if [c.name for c in a.columns] != [c.name for c in b.columns]:
        return False
    return all(same_storage(x, y) and x.primary_key == y.primary_key for x, y in zip(a.columns, b.columns))
