"""The core's write with a guard right before the commit: the one place the Conduit door asks
the core for it, so that moving to the core's own `guard=` parameter changes nothing else.

The core's writer is to call `guard()` right before the engine's commit statement, under the
table's lock, and again before every retry of that statement (a retry reads a new snapshot);
`guard` raises a DestinationError to abandon the commit with nothing written. Until the core
takes `guard=`, the guard runs at the end of `read` instead: also under the table's lock and
before anything is committed, but before the change set is shipped to the engine, and once
(not again before a retried statement).
"""
from __future__ import annotations

import inspect
from typing import Callable

from ..core.changes import ChangeSet, CommitResult
from ..core.model import TableSchema
from ..settings import Settings


def core_takes_guard(write: Callable) -> bool:
    try:
        return "guard" in inspect.signature(write).parameters
    except (TypeError, ValueError):
        return False


def write_guarded(core, settings: Settings, schema: str, table: str, read: Callable[[TableSchema], ChangeSet],
                  what: str, guard: Callable[[], None]) -> CommitResult:
    write = core.writer.write
    if core_takes_guard(write):
        return write(settings, schema, table, read, what=what, guard=guard)

    def read_then_guard(stored: TableSchema) -> ChangeSet:
        changes = read(stored)
        guard()
        return changes

    return write(settings, schema, table, read_then_guard, what=what)
