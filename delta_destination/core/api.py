"""The core's API as a library: doors build change sets and call it; it plans each request
as one Delta commit and hands it to the engine the router leases for it.

    core = DeltaCore(EngineRouter(EnginePool()), door="airbyte")   # doors: doors/runtime.py open_core
    core.tables.create(settings, "sales", TableSchema(...))
    core.writer.write(settings, "sales", "orders", lambda table: change_set)
    core.migrate(settings, MigrationDetails("sales", "orders", RenameTable(...)))

Doors use this object only: tables (create/alter/truncate and door markers), writer
(live writes), history (history mode), migrate, describe, drop_table, table_names,
probe (connection checks), upkeep, compaction (small files, in the background), engines (the router's
pool: health) and events (listeners).
"""
from __future__ import annotations

from typing import Optional

from ..engines.router import EngineRouter
from ..settings import Settings
from .writer import Writer
from .registry import TableRegistry
from .tables import Tables, validate_columns
from .events import Events
from .history import HistoryWriter
from .migrations import DropTable, MigrationDetails, Migrator
from .model import TableSchema
from .probe import probe_warehouse
from .table_dirs import clean_leftovers
from .upkeep import Upkeep
from .compaction import CompactionPolicy, SmallFileCompaction


__all__ = ["DeltaCore", "validate_columns"]


class DeltaCore:
    def __init__(self, router: EngineRouter, door: str = "core", compact_small_files: int = 0):
        """`compact_small_files`: compact a table's small files once it holds this many (0: never;
        core/compaction.py)."""
        self.router = router
        self.engines = router.pool
        self.events = Events(door)
        self._registry = TableRegistry(router, self.events)
        self.tables = Tables(self._registry)
        self.writer = Writer(self._registry)
        self.history = HistoryWriter(self._registry)
        self._migrator = Migrator(self._registry, self.tables)
        self.upkeep = Upkeep(self._registry)
        self.compaction = SmallFileCompaction(self._registry, CompactionPolicy(compact_small_files))
        self._registry.after_commit = self.compaction.after_commit

    def describe(self, settings: Settings, schema: str, table: str) -> Optional[TableSchema]:
        ref = self._registry.locate(settings, schema, table)
        with self._registry.session(settings) as eng:
            return self._registry.describe(eng, ref)

    def migrate(self, settings: Settings, details: MigrationDetails) -> str:
        """One Migrate operation: SUCCESS or UNSUPPORTED; raises typed errors."""
        return self._migrator.migrate(settings, details)

    def drop_table(self, settings: Settings, schema: str, table: str) -> None:
        """The table and its files are gone (nothing to do when it does not exist)."""
        self._migrator.migrate(settings, MigrationDetails(schema, table, DropTable()))

    def table_names(self, settings: Settings, schema: str, prefix: str = "") -> list[str]:
        """Names of the schema's tables starting with `prefix`, as far as the warehouse can be
        listed by the destination (empty elsewhere); names spelled in a way the destination does
        not write are left out."""
        return self._registry.table_names(settings, schema, prefix)

    def location(self, settings: Settings, schema: str, table: str) -> str:
        """Where the table lives (a path or a storage URL)."""
        return self._registry.locate(settings, schema, table).location

    def clean_leftovers(self, settings: Settings) -> int:
        """Remove what stopped destination processes left in the warehouse's private areas
        (staged batches, setup probes, dropped tables); returns how many (raises OSError when the
        store cannot be reached)."""
        return clean_leftovers(self._registry.warehouse(settings))

    def probe(self, settings: Settings) -> Optional[str]:
        """None when a probe table could be written and read back; else a reason the user can act on."""
        return probe_warehouse(self._registry, settings)
