"""The core's API as a library: doors build change sets and call it; it plans each request
as one Delta commit and hands it to the engine named by the request's Settings.

    core = DeltaCore(Engines(), door="airbyte")
    core.tables.create(settings, "sales", TableSchema(...))
    core.writer.write(settings, "sales", "orders", lambda table: change_set)
    core.migrate(settings, MigrationDetails("sales", "orders", RenameTable(...)))

Doors use this object only: tables (create/alter/truncate and door markers), writer
(live writes), history (history mode), migrate, describe, drop_table, table_names,
probe (connection checks), upkeep, engines (health) and events (listeners).
"""
from __future__ import annotations

from typing import Optional

from ..engines.session import Engines
from ..settings import Settings
from .apply import Writer
from .catalog import Catalog
from .ddl import Tables, validate_columns
from .events import Events
from .history import HistoryWriter
from .migrations import DropTable, MigrationDetails, Migrator
from .model import TableSchema
from .probe import probe_warehouse
from .upkeep import Upkeep


__all__ = ["DeltaCore", "validate_columns"]


class DeltaCore:
    def __init__(self, engines: Engines, door: str = "core"):
        self.engines = engines
        self.events = Events(door)
        self._catalog = Catalog(engines, self.events)
        self.tables = Tables(self._catalog)
        self.writer = Writer(self._catalog)
        self.history = HistoryWriter(self._catalog)
        self._migrator = Migrator(self._catalog, self.tables)
        self.upkeep = Upkeep(self._catalog)

    def describe(self, settings: Settings, schema: str, table: str) -> Optional[TableSchema]:
        ref = self._catalog.locate(settings, schema, table)
        with self._catalog.session(settings) as eng:
            return self._catalog.describe(eng, ref)

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
        return self._catalog.table_names(settings, schema, prefix)

    def location(self, settings: Settings, schema: str, table: str) -> str:
        """Where the table lives (a path or a storage URL)."""
        return self._catalog.locate(settings, schema, table).location

    def probe(self, settings: Settings) -> Optional[str]:
        """None when a probe table could be written and read back; else a reason the user can act on."""
        return probe_warehouse(self._catalog, settings)
