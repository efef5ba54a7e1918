"""Where tables are, one lock per table, and what the destination knows of their schema.

A table's exact column types (Spark's STRING hides JSON/XML/NAIVE_TIME), DECIMAL params,
string_byte_length and primary key are kept inside the table as the `fivetran.schema`
property (metadata.py); describe() merges it with the engine's view of the schema.

Every operation on a table opens it the same way (`Catalog.opened`): locate it (refusing
unsafe names before any work), get the engine session, take the table's lock, announce
the operation to listeners, and read its schema.
"""
from __future__ import annotations

import threading
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field, replace
from typing import Callable, Iterator, Optional

from ..engines.choice import EngineChoice, base_choice, merge_choice, should_prestart, spark_installed, upkeep_choice
from ..engines.dialect import dialect_for
from ..engines.engine_session import EngineSession
from ..engines.session import Engines
from ..errors import InvalidRequest, TableNotFound
from ..settings import Settings
from ..warehouse import Warehouse, name_of_component
from .. import logs, metrics
from . import metadata
from .events import Events, TableOutcome
from .delta_log import table_configuration
from .memory import TableSize, table_size
from .metastore import Metastore
from .model import TableSchema
from .types import column_from_spark, same_storage

log = logs.get(__name__)


@dataclass(frozen=True)
class TableRef:
    schema: str
    table: str
    location: str
    warehouse: Warehouse

    @property
    def display(self) -> str:
        return f"{self.schema}.{self.table}"


# Spark's MERGE, UPDATE and DELETE mark rows in a deletion vector instead of rewriting their files.
DELETION_VECTORS = "delta.enableDeletionVectors"


@dataclass
class OpenTable:
    """A table opened for one operation: where it is, the engine, what listeners will be told,
    and its schema when the operation was opened (None if it does not exist)."""

    settings: Settings          # with the engine that serves the operation (never auto)
    ref: TableRef
    eng: EngineSession
    outcome: TableOutcome
    table: Optional[TableSchema]
    choice: EngineChoice        # which engine serves it and why (engines/choice.py)
    size: Optional[TableSize] = None  # the table's live files when auto measured it at opening (None: not measured)
    leases: ExitStack = field(default_factory=ExitStack)  # engines leased on the way (move_to_spark), ended at closing

    @property
    def display(self) -> str:
        return self.ref.display

    @property
    def warehouse(self) -> Warehouse:
        return self.ref.warehouse

    @property
    def served_by(self) -> str:
        """The engine that serves the operation and why, for its log line."""
        return f"engine {self.eng.name} ({self.choice.reason})"

    @property
    def sql_name(self) -> str:
        """The table's name in the engine's SQL."""
        return self.eng.table_name(self.ref.location)


class Catalog:
    def __init__(self, engines: Engines, events: Optional[Events] = None):
        self.engines = engines
        self.events = events or Events()
        # Door working tables (events.working_table, set by the door) are never registered.
        self.metastore = Metastore(engines, lambda schema, table: self.events.working_table(schema, table))
        self._guard = threading.Lock()
        self._locks: dict[str, threading.Lock] = {}
        self._meta_cache: dict[str, metadata.StoredMetadata] = {}

    # ---- choosing the engine -------------------------------------------------------------
    def choose(self, settings: Settings, upkeep: bool = False) -> EngineChoice:
        """The engine of an operation that measures no table (engines/choice.py)."""
        return (upkeep_choice if upkeep else base_choice)(settings, spark_installed())

    @contextmanager
    def session(self, settings: Settings, upkeep: bool = False) -> Iterator[EngineSession]:
        """The engine of an operation that opens no table (a lease: see Engines.lease)."""
        choice = self.choose(settings, upkeep)
        with self.engines.lease(choice.settings(settings), on_demand=choice.auto) as eng:
            yield eng

    def move_to_spark(self, t: "OpenTable", choice: EngineChoice) -> None:
        """An opened table's operation continues on the local Spark engine (auto, before anything
        was written: the memory guard found the MERGE too big for Sail)."""
        log.info(f"{t.display}: moving the request to Apache Spark: {choice.reason}")
        metrics.engine_chosen(choice.engine, choice.code)
        t.settings = choice.settings(t.settings)
        t.eng = t.leases.enter_context(self.engines.lease(t.settings, on_demand=True))
        t.choice = choice

    def prepare_spark_rewrite(self, t: "OpenTable", guard: Optional[Callable[[], None]] = None) -> None:
        """Before auto rewrites a table on Apache Spark (a MERGE): deletion vectors on, in a
        metadata-only commit, once per table. Tables auto creates are Sail's, plain Delta; without
        deletion vectors Spark's MERGE copies every unchanged row of every file it touches, and with
        uniform keys that is the whole table, so it grows with the table, which is exactly the
        table auto sent to Spark for being big (docs/benchmarks.md: the 100k upsert into 3M rows on
        a fresh server took 68 s with them, 109-111 s without). Sail 0.7.2 and delta-rs read and write such
        tables (tests/test_cross_engine.py), as they do the tables `--engine spark` creates.
        A crash after this commit leaves the data as before the request; its replay skips it.
        `guard`: the door's last word before a commit (core/apply.py, CommitGuard), asked first."""
        if not (t.choice.auto and t.eng.name == "spark") or t.table is None:
            return
        configuration = table_configuration(t.warehouse, t.ref.location)
        if configuration is None or configuration.get(DELETION_VECTORS, "").lower() == "true":
            return
        if guard is not None:
            guard()
        log.info(f"{t.display}: turning deletion vectors on before its first rewrite on Apache Spark "
                 f"(a MERGE then marks replaced rows instead of copying every file it touches)")
        self.set_properties(t.eng, t.ref, {DELETION_VECTORS: "true"})

    # ---- locating and locking ------------------------------------------------------------

    @staticmethod
    def warehouse(settings: Settings) -> Warehouse:
        return Warehouse(settings.warehouse, settings.storage)

    def locate(self, settings: Settings, schema: str, table: str) -> TableRef:
        dialect_for(self.choose(settings).engine).check_warehouse_root(settings.warehouse)
        warehouse = self.warehouse(settings)
        return TableRef(schema, table, warehouse.table_location(schema, table), warehouse)

    def table_names(self, settings: Settings, schema: str, prefix: str = "") -> list[str]:
        """Names of the schema's tables (directories holding commits) that start with `prefix`."""
        wh = self.warehouse(settings)
        if not wh.can_list:
            return []
        out = []
        for entry in wh.storage.list(wh.schema_location(schema)):
            name = name_of_component(entry.name) if entry.is_dir else None
            if name is not None and name.startswith(prefix) and wh.has_commits(entry.location):
                out.append(name)
        return sorted(out)

    @contextmanager
    def opened(self, settings: Settings, schema: str, table: str, operation: Optional[str] = None,
               require: bool = True, also: tuple[TableRef, ...] = ()) -> Iterator[OpenTable]:
        """The one way an operation opens a table: located (names checked first), the engine's
        session, the table's lock (and those of `also`, in a fixed order), a START/COMPLETE/FAIL
        event when `operation` is named, and the current schema (TableNotFound when `require`)."""
        ref = self.locate(settings, schema, table)
        with self.locked(ref, *also):
            choice, size = self._choose_for(settings, ref)
            metrics.engine_chosen(choice.engine, choice.code)
            settings = choice.settings(settings)
            with self.engines.lease(settings, on_demand=choice.auto) as eng, self._operation(operation, ref) as outcome:
                current = self.require(eng, ref) if require else self.describe(eng, ref)
                if current is not None:
                    outcome.columns = current.columns
                t = OpenTable(settings, ref, eng, outcome, current, choice, size)
                with t.leases:   # moved to Spark on the way: that lease ends here
                    try:
                        yield t
                    finally:
                        if t.choice.auto and t.eng.name == "spark":
                            self._refresh_sail_entries(ref)

    def _refresh_sail_entries(self, ref: TableRef) -> None:
        """After auto ran an operation on Spark: Sail's sessions drop their catalog entry of the table,
        as after Sail's own schema changes (dialect.SailDialect: the entry keeps the schema seen when it
        was registered, and MERGE casts to it). The next Sail statement registers it again. Defensive: in
        tests/test_auto_engine.py Sail 0.7.2 also wrote a column Spark had added without it."""
        for sail in self.engines.sessions_of("sail"):
            try:
                sail.schema_changed(ref.location)
            except Exception as exc:  # noqa: BLE001 - an engine that does not answer has no entry to keep
                log.warning(f"{ref.display}: could not refresh Sail's entry of the table ({type(exc).__name__})")

    def _choose_for(self, settings: Settings, ref: TableRef) -> tuple[EngineChoice, Optional[TableSize]]:
        """With auto: Sail, unless the table is already too big for a MERGE on Sail; a table
        nearing that size has the Spark engine started ahead. The size measured is kept for the
        memory guard of the same request (the Delta log is read once)."""
        base = self.choose(settings)
        if not (base.auto and base.engine == "sail" and spark_installed()):
            return base, None
        measurable = ref.warehouse.can_list and ref.warehouse.has_commits(ref.location)
        size = table_size(ref) if measurable else None
        target = size.bytes if size is not None else None
        budget = settings.memory_budget_bytes
        choice = merge_choice(base, True, target, 0, budget)
        if choice.engine == "sail" and should_prestart(base, True, target, budget):
            self.engines.prestart_spark(settings)
        return choice, size

    @contextmanager
    def _operation(self, operation: Optional[str], ref: TableRef) -> Iterator[TableOutcome]:
        if operation is None:
            yield TableOutcome()
            return
        with self.events.operation(operation, ref.schema, ref.table, ref.location, ref.warehouse) as outcome:
            yield outcome

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

    # ---- forgetting ---------------------------------------------------------------------------
    def schema_changed(self, eng: EngineSession, ref: TableRef) -> None:
        eng.schema_changed(ref.location)

    def forget(self, ref: TableRef) -> None:
        self._meta_cache.pop(ref.location, None)

    # ---- describing -----------------------------------------------------------------------------
    def exists(self, eng: EngineSession, ref: TableRef) -> bool:
        """A table exists once its log holds a commit (asked of the storage where the destination
        can list it, else of the engine)."""
        if ref.warehouse.can_list:
            return ref.warehouse.has_commits(ref.location)
        return eng.has_table(ref.location)

    def describe(self, eng: EngineSession, ref: TableRef) -> Optional[TableSchema]:
        if not self.exists(eng, ref):
            return None
        fields = eng.columns(f"describe {ref.display}", ref.location)
        meta = self.stored_metadata(eng, ref)
        by_name = {c.name: c for c in meta.columns} if meta else {}
        cols = []
        for name, spark_type in fields:
            inferred = column_from_spark(name, spark_type)
            stored = by_name.get(name)
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
        texts = eng.property_values(f"read metadata of {ref.display}", ref.location, metadata.PROPERTY)
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
        eng.set_properties(f"set properties of {ref.display}", ref.location, props)

    def prepare_stats_for(self, eng: EngineSession, ref: TableRef, current: TableSchema, target: TableSchema) -> None:
        """Before data files are rewritten for `target`: no statistics on its DECIMAL columns
        (see metadata.stats_properties); only columns that exist now are listed."""
        have = set(current.column_names)
        safe = TableSchema(target.name, tuple(c for c in target.columns if c.name in have))
        props = metadata.stats_properties(safe)
        if props != metadata.stats_properties(current):  # no commit when nothing changes
            self.set_properties(eng, ref, props)
