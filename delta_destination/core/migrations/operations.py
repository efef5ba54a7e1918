"""The schema-migration operations (SDK v2 Migrate), as the core receives them."""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Optional, Union

from ..model import DataType

SUCCESS = "success"
UNSUPPORTED = "unsupported"


@dataclass(frozen=True)
class DropTable:
    pass


@dataclass(frozen=True)
class DropColumnInHistoryMode:
    column: str
    operation_timestamp: str


@dataclass(frozen=True)
class CopyTable:
    from_table: str
    to_table: str


@dataclass(frozen=True)
class CopyColumn:
    from_column: str
    to_column: str


@dataclass(frozen=True)
class CopyTableToHistoryMode:
    from_table: str
    to_table: str
    soft_deleted_column: Optional[str] = None


@dataclass(frozen=True)
class RenameTable:
    from_table: str
    to_table: str


@dataclass(frozen=True)
class RenameColumn:
    from_column: str
    to_column: str


@dataclass(frozen=True)
class AddColumnWithDefaultValue:
    column: str
    column_type: DataType
    default_value: Optional[str] = None


@dataclass(frozen=True)
class AddColumnInHistoryMode:
    column: str
    column_type: DataType
    default_value: Optional[str]
    operation_timestamp: str


@dataclass(frozen=True)
class UpdateColumnValue:
    column: str
    value: Optional[str]


class SyncModeMigration(enum.IntEnum):
    """Mirrors fivetran_sdk.v2.TableSyncModeMigrationType (same numbers)."""

    SOFT_DELETE_TO_LIVE = 0
    SOFT_DELETE_TO_HISTORY = 1
    HISTORY_TO_SOFT_DELETE = 2
    HISTORY_TO_LIVE = 3
    LIVE_TO_SOFT_DELETE = 4
    LIVE_TO_HISTORY = 5


@dataclass(frozen=True)
class TableSyncModeMigration:
    type: SyncModeMigration
    soft_deleted_column: Optional[str] = None
    keep_deleted_rows: Optional[bool] = None


Operation = Union[
    DropTable, DropColumnInHistoryMode, CopyTable, CopyColumn, CopyTableToHistoryMode, RenameTable, RenameColumn,
    AddColumnWithDefaultValue, AddColumnInHistoryMode, UpdateColumnValue, TableSyncModeMigration,
]


@dataclass(frozen=True)
class MigrationDetails:
    schema: str
    table: str
    operation: Optional[Operation]
