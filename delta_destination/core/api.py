"""The core's API as a library: doors build change sets and call it; it plans each request
as one Delta commit and hands it to the engine named by the request's Settings."""
from __future__ import annotations

from typing import Optional

from ..engines.session import Engines
from ..settings import Settings
from .apply import Writer
from .catalog import Catalog
from .ddl import Tables
from .events import Events
from .history import HistoryWriter
from .migrations import Migrator
from .model import TableSchema
from .upkeep import Upkeep


class DeltaCore:
    def __init__(self, engines: Engines, door: str = "core"):
        self.engines = engines
        self.events = Events(door)
        self.catalog = Catalog(engines, self.events)
        self.tables = Tables(self.catalog)
        self.writer = Writer(self.catalog)
        self.history = HistoryWriter(self.catalog)
        self.migrator = Migrator(self.catalog, self.tables)
        self.upkeep = Upkeep(self.catalog)

    def describe(self, settings: Settings, schema: str, table: str) -> Optional[TableSchema]:
        ref = self.catalog.locate(settings, schema, table)
        return self.catalog.describe(self.catalog.session(settings), ref)
