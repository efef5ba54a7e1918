"""The table model shared by the batch reader, the type mapping and the engine."""
from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace
from typing import Iterable, Optional


class DataType(enum.IntEnum):
    """Mirrors fivetran_sdk.v2.DataType (same numbers)."""

    UNSPECIFIED = 0
    BOOLEAN = 1
    SHORT = 2
    INT = 3
    LONG = 4
    DECIMAL = 5
    FLOAT = 6
    DOUBLE = 7
    NAIVE_DATE = 8
    NAIVE_DATETIME = 9
    UTC_DATETIME = 10
    BINARY = 11
    XML = 12
    STRING = 13
    JSON = 14
    NAIVE_TIME = 15


# System columns (SEMANTICS.md).
SYNCED = "_fivetran_synced"
DELETED = "_fivetran_deleted"
FIVETRAN_ID = "_fivetran_id"
START = "_fivetran_start"
END = "_fivetran_end"
ACTIVE = "_fivetran_active"

DEFAULT_DECIMAL = (38, 10)


@dataclass(frozen=True)
class Column:
    name: str
    type: DataType
    primary_key: bool = False
    precision: Optional[int] = None
    scale: Optional[int] = None
    string_byte_length: Optional[int] = None

    def decimal_params(self) -> tuple[int, int]:
        if self.type != DataType.DECIMAL:
            raise ValueError("not a decimal column")
        if self.precision is None:
            return DEFAULT_DECIMAL
        return int(self.precision), int(self.scale or 0)

    def with_(self, **changes) -> "Column":
        return replace(self, **changes)


@dataclass(frozen=True)
class TableSchema:
    name: str
    columns: tuple[Column, ...] = field(default_factory=tuple)

    def __post_init__(self):
        object.__setattr__(self, "columns", tuple(self.columns))

    @property
    def column_names(self) -> list[str]:
        return [c.name for c in self.columns]

    def get(self, name: str) -> Optional[Column]:
        for c in self.columns:
            if c.name == name:
                return c
        return None

    def has(self, name: str) -> bool:
        return self.get(name) is not None

    @property
    def primary_keys(self) -> list[str]:
        return [c.name for c in self.columns if c.primary_key]

    @property
    def is_history_mode(self) -> bool:
        """History-mode tables have _fivetran_start in their primary key."""
        col = self.get(START)
        return bool(col and col.primary_key)

    def merge_keys(self) -> list[str]:
        """The columns that identify a row for upserts/updates/deletes."""
        keys = self.primary_keys
        if keys:
            return keys
        if self.has(FIVETRAN_ID):
            return [FIVETRAN_ID]
        return []

    def with_columns(self, columns: Iterable[Column]) -> "TableSchema":
        return TableSchema(self.name, tuple(columns))
