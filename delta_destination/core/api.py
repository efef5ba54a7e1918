"""The core's API as a library: doors build change sets and call it; it plans each request
as one Delta commit and hands it to the engine the router leases for it.

    core = DeltaCore.open("airbyte", Runtime())   # its engines from the process's options (doors/runtime.py)
    core.tables.create(settings, "sales", TableSchema(...))
    core.writer.write(settings, "sales", "orders", lambda table: change_set)
    core.migrate(settings, MigrationDetails("sales", "orders", RenameTable(...)))

Doors use this object only: tables (create/alter/truncate and door markers), writer
(live writes), history (history mode), migrate, describe, drop_table, table_names,
probe (connection checks), upkeep, compaction (small files, in the background), events (listeners)
and the engine calls a door's process makes itself (start_engines, warm_up_engines, engines_healthy,
engines_answer, silent_engines, engine_notice, stop_engines). A door never reaches the router or
its engine pool: the core asks the router, the router the pool.
"""
from __future__ import annotations

from typing import Optional

from ..engines.router import EngineRouter, check_warehouse
from ..settings import Runtime, Settings
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
        self._router = router
        self.events = Events(door)
        self._registry = TableRegistry(router, self.events)
        self.tables = Tables(self._registry)
        self.writer = Writer(self._registry)
        self.history = HistoryWriter(self._registry)
        self._migrator = Migrator(self._registry, self.tables)
        self.upkeep = Upkeep(self._registry)
        self.compaction = SmallFileCompaction(self._registry, CompactionPolicy(compact_small_files))
        self._registry.after_commit = self.compaction.after_commit

    @classmethod
    def open(cls, door: str, options: Runtime) -> "DeltaCore":
        """The core of a door's process, with its engines as the process's options say
        (EngineRouter.for_runtime): the one place a door's engines are made."""
        return cls(EngineRouter.for_runtime(options, door), door=door, compact_small_files=options.compact_small_files)

    # ---- the door's own engine calls (start-up, health, setup tests, the end) ------------------
    @staticmethod
    def check_warehouse(settings: Settings) -> None:
        """Refuse (InvalidRequest) a warehouse root the engine these settings choose would write
        somewhere else than asked, before any work: also before a door's process opens its core."""
        check_warehouse(settings)

    def start_engines(self, settings: Settings) -> None:
        """Start (or connect to) the engine requests of these settings go to first, so the first
        request does not wait for it; raises what the start raised."""
        self._router.start(settings)

    def warm_up_engines(self, settings: Settings) -> None:
        """Warm up the started engine in the background where that pays (a configured local
        Apache Spark engine); nothing otherwise."""
        self._router.warm_up(settings)

    def engines_healthy(self, settings: Settings) -> bool:
        """Does the engine of these settings answer now (a local one that died is not restarted)?"""
        return self._router.healthy(settings)

    def engines_answer(self, settings: Settings) -> bool:
        """Can the engine of these settings be reached, (re)starting a local one if needed?"""
        return self._router.answers(settings)

    def silent_engines(self, settings: Settings) -> list[str]:
        """The engines requests of these settings use that did not answer a connection check, by
        their labels ("the embedded Sail engine", "the Apache Spark server at ..."); empty: all did."""
        return self._router.silent_engines(settings)

    def engine_notice(self, settings: Settings) -> Optional[str]:
        """What an operator should know of how requests of these settings are served (None: nothing)."""
        return self._router.notice(settings)

    def stop_engines(self) -> None:
        """Every engine process stops (a start in progress is cancelled)."""
        self._router.stop()

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
