"""Change sets: what a front door asks the core to apply to one table.

A door turns its input (Fivetran batch files, Airbyte records, OpenCDC records) into
typed Arrow in the table's column types, one operation per piece, and flags for cells
whose stored value must be kept (Fivetran's "unmodified" marker). The core plans the
commit from there; it never sees a protocol or a file format.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Optional

import pyarrow as pa


class Op(enum.IntEnum):
    UPSERT = 0          # insert, or replace the stored row with the same key
    UPDATE = 1          # change the stored row with the same key (missing: ignored)
    DELETE = 2          # remove the stored row with the same key (missing: ignored)
    EARLIEST_START = 3  # history mode: rewind the key to this _fivetran_start
    APPEND = 4          # insert, whatever is stored (tables without a key)


@dataclass(frozen=True)
class Changes:
    """Rows with one operation, in the table's Arrow types.

    `values` holds a subset of the table's columns, by name. A column absent from
    `values` keeps its stored value on update (and is NULL on insert). `keep` (same
    columns, bool) marks single cells whose stored value is kept. `source` names where
    the rows came from for error messages ("file batch_1.csv"), never their content.
    """

    op: Op
    values: pa.Table
    keep: Optional[pa.Table] = None
    source: str = ""

    @property
    def num_rows(self) -> int:
        return self.values.num_rows


@dataclass
class ChangeSet:
    """Everything one request applies to one table, as one Delta commit.

    `newer_by` (optional) names columns that order versions of a row: a stored row is
    replaced or deleted only by an incoming row that is newer, comparing the columns in
    turn with NULL as the oldest value (Airbyte's dedup: cursor, then extraction time).
    """

    parts: list[Changes] = field(default_factory=list)
    newer_by: tuple[str, ...] = ()

    def add(self, changes: Changes) -> None:
        # Empty pieces are kept: their columns are still checked (a key column missing).
        self.parts.append(changes)

    def count(self, op: Op) -> int:
        return sum(p.num_rows for p in self.parts if p.op == op)

    @property
    def num_rows(self) -> int:
        return sum(p.num_rows for p in self.parts)

    @property
    def nbytes(self) -> int:
        """Arrow bytes of every part (what the engine is shipped is about this much)."""
        return sum(p.values.nbytes for p in self.parts)

    def of(self, op: Op) -> list[Changes]:
        return [p for p in self.parts if p.op == op]


@dataclass(frozen=True)
class CommitResult:
    """What one apply did: requested row counts per operation and whether it committed."""

    table: str
    location: str
    upserts: int = 0
    updates: int = 0
    deletes: int = 0
    committed: bool = False
    seconds: float = 0.0
