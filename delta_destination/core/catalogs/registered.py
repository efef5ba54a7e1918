"""Keeps the catalog of each request's settings in step with the tables (a no-op without one).

The core's operations call this, never a catalog directly: it finds the settings' catalog
(kinds.catalog_for) and leaves out door working tables (Airbyte's overwrite staging), whose rows
reach a real table in a later operation. A table's Iceberg catalog entry (iceberg_catalog_uri) is
made and moved by its mirror (core/iceberg/after_commit.py); here it is dropped with its table and
with the old name of a renamed one.
"""
from __future__ import annotations

from typing import Callable, Optional

from ...engines.router import EngineRouter
from ...settings import Settings
from ..iceberg.entries import check_entry_name, forget_entry
from .catalog import Catalog
from .kinds import catalog_for


class RegisteredTables:
    """The tables' entries in the catalog of each request's settings."""

    def __init__(self, router: EngineRouter, working_table: Callable[[str, str], bool]):
        self.router = router
        self.working_table = working_table

    def catalog(self, settings: Settings, schema: str, table: str) -> Optional[Catalog]:
        """The catalog that holds (or would hold) `schema.table` (None: none does)."""
        if self.working_table(schema, table):
            return None
        return catalog_for(settings, self.router)

    def check(self, settings: Settings, schema: str, table: str) -> None:
        """Before a table is created or renamed to this name: can it be registered?"""
        catalog = self.catalog(settings, schema, table)
        if catalog is not None:
            catalog.check(schema, table)
        if not self.working_table(schema, table):
            check_entry_name(settings, schema, table)

    def register(self, settings: Settings, schema: str, table: str, location: str) -> None:
        catalog = self.catalog(settings, schema, table)
        if catalog is not None:
            catalog.register(schema, table, location)

    def drop(self, settings: Settings, schema: str, table: str, location: str) -> None:
        """The entries of `schema.table`, the table that was at `location`, gone."""
        catalog = self.catalog(settings, schema, table)
        if catalog is not None:
            catalog.drop(schema, table)
        if not self.working_table(schema, table):
            forget_entry(settings, schema, table, location)

    def rename(self, settings: Settings, schema: str, old: str, new: str, location: str, old_location: str) -> None:
        """`schema.old` (at `old_location`) is now `schema.new` at `location`; a working table on
        either side has no entry (a staging table renamed to a real one is registered under its new
        name)."""
        if self.working_table(schema, old):
            self.register(settings, schema, new, location)
        elif self.working_table(schema, new):
            self.drop(settings, schema, old, old_location)
        else:
            catalog = catalog_for(settings, self.router)
            if catalog is not None:
                catalog.rename(schema, old, new, location)
            forget_entry(settings, schema, old, old_location)

    def describe(self, settings: Settings, schema: str, table: str) -> Optional[str]:
        """Where the catalog points readers of `schema.table` (None: no catalog, or no entry)."""
        catalog = self.catalog(settings, schema, table)
        return catalog.describe(schema, table) if catalog is not None else None
