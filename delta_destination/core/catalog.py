"""Where tables are, one lock per table, and what the destination knows of their schema.

A table's exact column types (Spark's STRING hides JSON/XML/NAIVE_TIME), DECIMAL params,
string_byte_length and primary key are kept inside the table as the `fivetran.schema`
property (metadata.py); describe() merges it with the engine's view of the schema.
"""
from __future__ import annotations

import threading
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Iterator, Optional

from ..engines.dialect import EngineSession, dialect_for
from ..engines.errors import run_engine
from ..engines.session import Engines
from ..settings import Settings
from ..warehouse import Warehouse, has_commits, is_url
from . import metadata
from .errors import InvalidRequest, TableNotFound
from .events import Events
from .model import TableSchema
from .sql import properties_sql
from .types import column_from_spark, same_storage


@dataclass(frozen=True)
class TableRef:
    schema: str
    table: str
    location: str

    @property
    def display(self) -> str:
        return f"{self.schema}.{self.table}"


class Catalog:
    def __init__(self, engines: Engines, events: Optional[Events] = None):
        self.engines = engines
        self.events = events or Events()
        self._guard = threading.Lock()
        self._locks: dict[str, threading.Lock] = {}
        self._meta_cache: dict[str, metadata.StoredMetadata] = {}

    # ---- locating and locking ------------------------------------------------------------
    def session(self, settings: Settings) -> EngineSession:
        return self.engines.get(settings)

    @staticmethod
    def warehouse(settings: Settings) -> Warehouse:
        return Warehouse(settings.warehouse)

    def locate(self, settings: Settings, schema: str, table: str) -> TableRef:
        dialect_for(settings.engine).check_warehouse_root(settings.warehouse)
        return TableRef(schema, table, self.warehouse(settings).table_location(schema, table))

    def check_new_name(self, settings: Settings, ref: TableRef) -> None:
        """Before a table is created under `ref`'s name: refuse a name that differs only in case
        from an existing table of the schema (Spark and most readers would mix them up)."""
        twin = self.warehouse(settings).case_twin(ref.schema, ref.table)
        if twin is not None:
            raise InvalidRequest(
                f"table {ref.display}: schema {ref.schema!r} already has a table whose name differs from "
                f"{ref.table!r} only in case (directory {twin!r}); Delta readers resolve table names "
                f"case-insensitively, so the two would mix. Rename one of them")

    def lock(self, ref: TableRef) -> threading.Lock:
        """Requests for one table are serialized; different tables run in parallel."""
        with self._guard:
            return self._locks.setdefault(ref.location, threading.Lock())

    @contextmanager
    def locked(self, *refs: TableRef) -> Iterator[None]:
        """Locks in a fixed (sorted) order, so two-table operations cannot deadlock."""
        with ExitStack() as stack:
            for location in sorted({r.location for r in refs}):
                with self._guard:
                    lock = self._locks.setdefault(location, threading.Lock())
                stack.enter_context(lock)
            yield

    # ---- naming and forgetting -----------------------------------------------------------------
    def sql_name(self, eng: EngineSession, ref: TableRef) -> str:
        return eng.dialect.table_name(eng.spark, ref.location)

    def schema_changed(self, eng: EngineSession, ref: TableRef) -> None:
        eng.dialect.schema_changed(eng.spark, ref.location)

    def forget(self, ref: TableRef) -> None:
        self._meta_cache.pop(ref.location, None)

    # ---- describing -----------------------------------------------------------------------------
    def exists(self, eng: EngineSession, ref: TableRef) -> bool:
        if not is_url(ref.location):
            return has_commits(ref.location)
        try:
            eng.spark.read.format("delta").load(ref.location).schema
            return True
        except Exception:  # noqa: BLE001 - any failure to load means "no table there"
            return False

    def describe(self, eng: EngineSession, ref: TableRef) -> Optional[TableSchema]:
        if not self.exists(eng, ref):
            return None
        fields = run_engine(f"describe {ref.display}",
                            lambda: eng.spark.read.format("delta").load(ref.location).schema.fields)
        meta = self.stored_metadata(eng, ref)
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

    def require(self, eng: EngineSession, ref: TableRef) -> TableSchema:
        """The table's schema, or TableNotFound."""
        table = self.describe(eng, ref)
        if table is None:
            raise TableNotFound(f"table {ref.display} does not exist")
        return table

    # ---- stored metadata -----------------------------------------------------------------------
    def stored_metadata(self, eng: EngineSession, ref: TableRef) -> Optional[metadata.StoredMetadata]:
        cached = self._meta_cache.get(ref.location)
        if cached is not None:
            return cached
        texts = run_engine(f"read metadata of {ref.display}",
                           lambda: eng.dialect.property_values(eng.spark, ref.location, metadata.PROPERTY))
        meta = metadata.latest(texts)
        if meta is not None:
            self._meta_cache[ref.location] = meta
        return meta

    def remember_created(self, ref: TableRef, schema: TableSchema) -> None:
        self._meta_cache[ref.location] = metadata.StoredMetadata(1, schema.columns)

    def set_metadata(self, eng: EngineSession, ref: TableRef, schema: TableSchema,
                     stats_schema: Optional[TableSchema] = None) -> None:
        """`stats_schema`: the columns the Delta schema holds right now, when that differs from
        `schema` (Delta refuses statistics settings naming columns it does not have)."""
        meta = self.stored_metadata(eng, ref)
        gen = (meta.generation if meta else 0) + 1
        props = {metadata.PROPERTY: metadata.encode(schema, gen), **metadata.stats_properties(stats_schema or schema)}
        self.set_properties(eng, ref, props)
        self._meta_cache[ref.location] = metadata.StoredMetadata(gen, schema.columns)

    def tidy_metadata(self, eng: EngineSession, ref: TableRef, current: TableSchema) -> None:
        """After a crash between a data commit and the last metadata commit, the stored
        metadata may still list vanished columns: write exactly what the table holds."""
        meta = self.stored_metadata(eng, ref)
        if meta is None or tuple(meta.columns) != tuple(current.columns):
            self.set_metadata(eng, ref, current)

    def set_properties(self, eng: EngineSession, ref: TableRef, props: dict[str, str]) -> None:
        name = self.sql_name(eng, ref)
        sql = f"ALTER TABLE {name} SET TBLPROPERTIES ({properties_sql(props)})"
        run_engine(f"set properties of {ref.display}", lambda: eng.spark.sql(sql).collect())

    def prepare_stats_for(self, eng: EngineSession, ref: TableRef, current: TableSchema, target: TableSchema) -> None:
        """Before data files are rewritten for `target`: no statistics on its DECIMAL columns
        (see metadata.stats_properties); only columns that exist now are listed."""
        have = set(current.column_names)
        safe = TableSchema(target.name, tuple(c for c in target.columns if c.name in have))
        props = metadata.stats_properties(safe)
        if props != metadata.stats_properties(current):  # no commit when nothing changes
            self.set_properties(eng, ref, props)
