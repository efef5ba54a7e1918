"""Migrate (SDK v2 schema migrations): one handler family per module, dispatched here.

Semantics follow Fivetran's "Schema Migration Helper Guide"
(fivetran_partner_sdk/schema-migration-helper-service.md); common.py lists the safety
rules every operation keeps.
"""
from __future__ import annotations

import time
from typing import Callable

from ... import logs
from ...settings import Settings
from ..registry import TableRegistry
from ..tables import Tables
from ...errors import InvalidRequest
from .columns import ColumnMigrations
from .history_columns import HistoryColumnMigrations
from .operations import (
    SUCCESS,
    UNSUPPORTED,
    AddColumnInHistoryMode,
    AddColumnWithDefaultValue,
    CopyColumn,
    CopyTable,
    CopyTableToHistoryMode,
    DropColumnInHistoryMode,
    DropTable,
    MigrationDetails,
    Operation,
    RenameColumn,
    RenameTable,
    SyncModeMigration,
    TableSyncModeMigration,
    UpdateColumnValue,
)
from .sync_modes import SyncModeMigrations
from .tables import TableMigrations

log = logs.get(__name__)

__all__ = [
    "SUCCESS", "UNSUPPORTED", "AddColumnInHistoryMode", "AddColumnWithDefaultValue", "CopyColumn", "CopyTable",
    "CopyTableToHistoryMode", "DropColumnInHistoryMode", "DropTable", "MigrationDetails", "Migrator", "Operation",
    "RenameColumn", "RenameTable", "SyncModeMigration", "TableSyncModeMigration", "UpdateColumnValue",
]


# What each migration does to its table, in OpenLineage's lifecycle words (for listeners).
LIFECYCLE = {
    DropTable: "DROP", RenameTable: "RENAME", CopyTable: "CREATE", CopyTableToHistoryMode: "CREATE",
    RenameColumn: "ALTER", CopyColumn: "ALTER", AddColumnWithDefaultValue: "ALTER", UpdateColumnValue: "ALTER",
    AddColumnInHistoryMode: "ALTER", DropColumnInHistoryMode: "ALTER", TableSyncModeMigration: "OVERWRITE",
}


def _snake(name: str) -> str:
    return "".join("_" + ch.lower() if ch.isupper() else ch for ch in name).lstrip("_")


class Migrator:
    def __init__(self, registry: TableRegistry, tables: Tables):
        self.registry = registry
        t = TableMigrations(registry, tables)
        c = ColumnMigrations(registry, tables)
        h = HistoryColumnMigrations(registry, tables)
        s = SyncModeMigrations(registry, tables)
        self._handlers: dict[type, Callable] = {
            DropTable: t.drop_table,
            RenameTable: t.rename_table,
            CopyTable: t.copy_table,
            CopyTableToHistoryMode: t.copy_table_to_history_mode,
            RenameColumn: c.rename_column,
            CopyColumn: c.copy_column,
            AddColumnWithDefaultValue: c.add_column_with_default_value,
            UpdateColumnValue: c.update_column_value,
            AddColumnInHistoryMode: h.add_column_in_history_mode,
            DropColumnInHistoryMode: h.drop_column_in_history_mode,
            TableSyncModeMigration: s.table_sync_mode_migration,
        }

    def _columns_after(self, settings: Settings, details: MigrationDetails) -> tuple:
        """The table's columns once a migration committed, for listeners (lineage). Reporting
        only: a table that moved away (rename, drop) or any failure gives no columns."""
        try:
            ref = self.registry.locate(settings, details.schema, details.table)
            with self.registry.session(settings) as eng:
                table = self.registry.describe(eng, ref)
        except Exception:  # noqa: BLE001 - the migration has committed; never fail it now
            return ()
        return table.columns if table is not None else ()

    def _written(self, settings: Settings, details: MigrationDetails) -> tuple:
        """The tables a migration that succeeded leaves written (for their after-commit work): the
        new table of a rename or copy, none after a drop, else the table itself."""
        op = details.operation
        if isinstance(op, DropTable):
            return ()
        name = getattr(op, "to_table", None) or details.table
        try:
            return (self.registry.locate(settings, details.schema, name),)
        except InvalidRequest:
            return ()

    def migrate(self, settings: Settings, details: MigrationDetails) -> str:
        """Runs one migration; returns SUCCESS or UNSUPPORTED, raises typed errors."""
        handler = self._handlers.get(type(details.operation))
        if handler is None:
            raise InvalidRequest("the migration request names no known operation")
        start = time.monotonic()
        name = "Migrate:" + _snake(type(details.operation).__name__)
        try:
            ref = self.registry.locate(settings, details.schema, details.table)
            location, warehouse = ref.location, ref.warehouse
        except InvalidRequest:  # some operations name their tables elsewhere (from_table); they check
            location, warehouse = "", None
        with self.registry.events.operation(name, details.schema, details.table, location, warehouse) as outcome:
            result, summary = handler(settings, details, details.operation)
            outcome.committed = result == SUCCESS
            outcome.lifecycle = LIFECYCLE.get(type(details.operation)) if outcome.committed else None
            if outcome.committed and location and self.registry.events.listeners:
                outcome.columns = self._columns_after(settings, details)
        if result == SUCCESS and self.registry.mirrors(settings):   # locating the written tables costs a check
            self.registry.mirror_committed(settings, *self._written(settings, details))
        log.info(f"Migrate {details.schema}.{details.table}: {summary} ({time.monotonic() - start:.2f}s)")
        return result
