"""Where tables are, one lock per table, and what the destination knows of their schema.

A table's exact column types (Spark's STRING hides JSON/XML/NAIVE_TIME), DECIMAL params,
string_byte_length and primary key are kept inside the table as the `fivetran.schema`
property (metadata.py); describe() merges it with the engine's view of the schema.

Every operation on a table opens it the same way (`TableRegistry.opened`): locate it (refusing
unsafe names before any work), take the table's lock, lease an engine from the router
(engines/router.py: which engine, and why, is the router's business), announce the operation
to listeners, and read its schema.
"""
from __future__ import annotations

import threading
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator, Optional, TypeVar

from ..engines.router import EngineLease, EngineRouter, EngineSession
from ..errors import DestinationError, InvalidRequest, TableNotFound
from ..settings import ICEBERG_OFF, Settings
from ..names import name_of_component
from ..warehouse import Warehouse
from .. import logs
from . import metadata
from .changes import ChangeSet
from .events import Events, TableOutcome
from .delta_log import TableSnapshot, commit_entries, commits_keep_metadata, has_commits, newest_configuration, read_snapshot
from .memory import table_size
from .catalogs import RegisteredTables
from .iceberg.after_commit import mirror_after_commit
from .model import TableSchema
from .table_dirs import case_twin, table_location
from .types import column_from_spark, same_storage

log = logs.get(__name__)
T = TypeVar("T")


@dataclass(frozen=True)
class TableRef:
    schema: str
    table: str
    location: str
    warehouse: Warehouse

    @property
    def display(self) -> str:
        return f"{self.schema}.{self.table}"


@dataclass(frozen=True)
class Described:
    """A table's schema as of one commit (`stamp`: that commit file's modification time, so a
    table dropped and created again is never taken for the one described)."""

    version: int
    stamp: float
    table: TableSchema


@dataclass(frozen=True)
class ReadAhead:
    """A request's input read before the table's lock was taken, and the schema it was read for."""

    table: TableSchema
    value: object

    @property
    def batch_bytes(self) -> Optional[int]:
        """The Arrow bytes of a change set read ahead (None for other input)."""
        return self.value.nbytes if isinstance(self.value, ChangeSet) else None


@dataclass
class OpenTable:
    """A table opened for one operation: where it is, the engine, what listeners will be told,
    and its schema when the operation was opened (None if it does not exist)."""

    ref: TableRef
    lease: EngineLease          # the engine that serves it, and why
    outcome: TableOutcome
    table: Optional[TableSchema]
    _snapshot: Optional[TableSnapshot] = None  # its Delta log, once read (snapshot())
    _read: bool = False

    @property
    def eng(self) -> EngineSession:
        """The engine session (it can change once: a write's plan may move its MERGE elsewhere)."""
        return self.lease.session

    @property
    def settings(self) -> Settings:
        """The request's settings with the engine that serves the operation (never auto)."""
        return self.lease.settings

    @property
    def display(self) -> str:
        return self.ref.display

    @property
    def warehouse(self) -> Warehouse:
        return self.ref.warehouse

    @property
    def served_by(self) -> str:
        """The engine that serves the operation and why, for its log line."""
        return self.lease.served_by

    def snapshot(self) -> Optional[TableSnapshot]:
        """The table's Delta log as of now (the table's lock is held), read once per operation:
        at opening when the router needed the table's size, else at the first ask; None where the
        destination cannot read the log itself (or there is no table)."""
        if not self._read:
            self._snapshot, self._read = read_table_snapshot(self.ref), True
        return self._snapshot

    def input(self, read: Callable[[TableSchema], T], ahead: Optional["ReadAhead"]) -> T:
        """The request's input for the table as it is now: what was read ahead of the lock when
        the schema is still the one it was read for, else read again."""
        if ahead is not None and ahead.table == self.table:
            return ahead.value
        return read(self.table)

    @property
    def sql_name(self) -> str:
        """The table's name in the engine's SQL."""
        return self.eng.table_name(self.ref.location)


def read_table_snapshot(ref: TableRef) -> Optional[TableSnapshot]:
    """The snapshot of the table at `ref` (None: no table, or a log the destination cannot read)."""
    return read_snapshot(ref.warehouse, ref.location)


class TableRegistry:
    def __init__(self, router: EngineRouter, events: Optional[Events] = None):
        self.router = router
        self.events = events or Events()
        # Door working tables (events.working_table, set by the door) are never registered.
        self.catalogs = RegisteredTables(router, lambda schema, table: self.events.working_table(schema, table))
        self._guard = threading.Lock()
        self._locks: dict[str, threading.Lock] = {}
        self._meta_cache: dict[str, metadata.StoredMetadata] = {}
        self._described: dict[str, Described] = {}   # location -> its schema as of a commit
        # Called with a table's ref once an operation that committed to it has released its lock
        # (core/compaction.py looks at its small files then).
        self.after_commit: Optional[Callable[[TableRef, Settings], None]] = None

    # ---- engines -----------------------------------------------------------------------------
    @contextmanager
    def session(self, settings: Settings, upkeep: bool = False) -> Iterator[EngineSession]:
        """The engine of an operation that opens no table (a lease from the router)."""
        with self.router.lease(settings, upkeep) as lease:
            yield lease.session

    # ---- locating and locking ------------------------------------------------------------

    @staticmethod
    def warehouse(settings: Settings) -> Warehouse:
        return Warehouse(settings.warehouse, settings.storage)

    def locate(self, settings: Settings, schema: str, table: str) -> TableRef:
        self.router.check_warehouse(settings)
        warehouse = self.warehouse(settings)
        return TableRef(schema, table, table_location(warehouse, schema, table), warehouse)

    def table_names(self, settings: Settings, schema: str, prefix: str = "") -> list[str]:
        """Names of the schema's tables (directories holding commits) that start with `prefix`."""
        wh = self.warehouse(settings)
        if not wh.can_list:
            return []
        out = []
        for entry in wh.storage.list(wh.schema_location(schema)):
            name = name_of_component(entry.name) if entry.is_dir else None
            if name is not None and name.startswith(prefix) and has_commits(wh, entry.location):
                out.append(name)
        return sorted(out)

    @contextmanager
    def opened(self, settings: Settings, schema: str, table: str, operation: Optional[str] = None,
               require: bool = True, also: tuple[TableRef, ...] = (), batch_bytes: Optional[int] = None,
               ref: Optional[TableRef] = None) -> Iterator[OpenTable]:
        """The one way an operation opens a table: located (names checked first; `ref`: already
        located by the caller), the engine's session, the table's lock (and those of `also`, in a
        fixed order), a START/COMPLETE/FAIL event when `operation` is named, and the current schema
        (TableNotFound when `require`). `batch_bytes`: the size of a batch read ahead, for the
        router (EngineRouter.table_lease); a write reads the table's Delta log at opening (it plans
        from it), other operations only when the router's choice needs the table's size."""
        ref = ref or self.locate(settings, schema, table)
        opened: list[OpenTable] = []
        with self.locked(ref, *also):
            snapshot, read = None, False
            if batch_bytes is not None or self.router.measures_tables(settings):
                snapshot, read = read_table_snapshot(ref), True
            size = table_size(snapshot)
            with self.router.table_lease(settings, size.bytes if size else None, ref.location, batch_bytes) as lease, \
                    self._operation(operation, ref) as outcome:
                current = self.require(lease.session, ref) if require else self.describe(lease.session, ref)
                if current is not None:
                    outcome.columns = current.columns
                opened.append(OpenTable(ref, lease, outcome, current, snapshot, read))
                yield opened[0]
            if opened[0].outcome.committed:
                self._mirror(settings, ref)
        if self.after_commit is not None and opened[0].outcome.committed:
            self.after_commit(ref, settings)

    def after_commit_steps(self, settings: Settings) -> tuple[str, ...]:
        """What runs once a write committed, for its plan's log line."""
        return (("events",) + (("Iceberg mirror",) if self.mirrors(settings) else ())
                + (("small-file compaction check",) if self.after_commit is not None else ()))

    @staticmethod
    def mirrors(settings: Settings) -> bool:
        """Does a commit under these settings have Iceberg metadata to bring up to date (`iceberg`)?"""
        return settings.iceberg != ICEBERG_OFF

    def mirror_committed(self, settings: Settings, *refs: TableRef) -> None:
        """After-commit work of an operation that committed under its own locks (migrations, upkeep):
        each table's Iceberg metadata brought up to its Delta log, under the table's lock.
        Operations opened with `opened` get it there, before their lock is released."""
        if not self.mirrors(settings):
            return
        for ref in refs:
            with self.locked(ref):
                self._mirror(settings, ref)

    def _mirror(self, settings: Settings, ref: TableRef) -> None:
        """The table's Iceberg metadata caught up with its Delta log (setting `iceberg`; core/iceberg/),
        and its Iceberg catalog entry with that (none for a door's working table); never raises: a
        failed mirror is logged and caught up by the next commit."""
        entry = None if self.events.working_table(ref.schema, ref.table) else (ref.schema, ref.table)
        mirror_after_commit(settings, ref.warehouse, ref.display, ref.location, entry)

    def read_ahead(self, settings: Settings, ref: TableRef, read: Callable[[TableSchema], object]) -> Optional[ReadAhead]:
        """A request's input (its batch files: decrypting, decompressing and parsing them is most
        of a small request's time) read for the table's current schema BEFORE its lock is taken,
        so other requests for the table do not wait on it; `OpenTable.input` uses it once the
        lock is held and the schema is still that one. None when there is no table or reading
        failed: then it is read again under the lock, where its errors are answered."""
        try:
            with self.session(settings) as eng:
                current = self.describe(eng, ref)
            if current is None:
                return None
            return ReadAhead(current, read(current))
        except DestinationError:
            return None

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
        twin = case_twin(self.warehouse(settings), ref.schema, ref.table)
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
        self._described.pop(ref.location, None)

    # ---- describing -----------------------------------------------------------------------------
    def exists(self, eng: EngineSession, ref: TableRef) -> bool:
        """A table exists once its log holds a commit (asked of the storage where the destination
        can list it, else of the engine)."""
        if ref.warehouse.can_list:
            return has_commits(ref.warehouse, ref.location)
        return eng.has_table(ref.location)

    def describe(self, eng: EngineSession, ref: TableRef) -> Optional[TableSchema]:
        """The table's schema (None: no table). Where the destination can list the warehouse, a
        schema described at some commit is reused while the log shows only commits without a
        metaData action since (data commits), so most requests ask the engine nothing."""
        if not ref.warehouse.can_list:
            return self._describe_by_engine(eng, ref) if eng.has_table(ref.location) else None
        stamps = {int(e.name[:20]): e.mtime for e in commit_entries(ref.warehouse, ref.location)}
        if not stamps:
            return None
        version = max(stamps)
        known = self._described.get(ref.location)
        if known is not None and stamps.get(known.version) == known.stamp and version >= known.version \
                and commits_keep_metadata(ref.warehouse, ref.location, known.version, version):
            table = known.table
        else:
            table = self._describe_by_engine(eng, ref)
        self._described[ref.location] = Described(version, stamps[version], table)
        return table

    def _describe_by_engine(self, eng: EngineSession, ref: TableRef) -> TableSchema:
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
        texts = self.property_values(eng, ref, metadata.PROPERTY)
        meta = metadata.latest(texts)
        if meta is not None:
            self._meta_cache[ref.location] = meta
        return meta

    def property_values(self, eng: EngineSession, ref: TableRef, key: str) -> list[str]:
        """The values a table property has had, the current one last: where the destination reads
        the log itself, its current value (the table's snapshot, or its newest metaData action for a
        table delta-rs refuses); elsewhere (a store only the engine reaches) what the engine says."""
        if ref.warehouse.can_list:
            snapshot = read_snapshot(ref.warehouse, ref.location)
            if snapshot is not None:
                value = snapshot.configuration.get(key)
                return [value] if value else []
            # A table delta-rs refuses (a protocol feature it lacks): its newest metaData action,
            # read by the same module from the JSON commits or the newest checkpoint.
            configuration = newest_configuration(ref.warehouse, ref.location)
            if configuration is not None:
                value = configuration.get(key)
                return [value] if value else []
        return eng.property_values(f"read property {key} of {ref.display}", ref.location, key)

    def remember_created(self, ref: TableRef, schema: TableSchema) -> None:
        self._meta_cache[ref.location] = metadata.StoredMetadata(1, schema.columns)

    def set_metadata(self, eng: EngineSession, ref: TableRef, schema: TableSchema,
                     stats_schema: Optional[TableSchema] = None, extra: Optional[dict[str, str]] = None) -> None:
        """`stats_schema`: the columns the Delta schema holds right now, when that differs from
        `schema` (Delta refuses statistics settings naming columns it does not have); `extra`: other
        table properties set in the same commit (a protocol upgrade)."""
        meta = self.stored_metadata(eng, ref)
        gen = (meta.generation if meta else 0) + 1
        props = {**(extra or {}), metadata.PROPERTY: metadata.encode(schema, gen),
                 **metadata.stats_properties(stats_schema or schema)}
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
