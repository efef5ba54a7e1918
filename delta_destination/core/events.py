"""Table operations as events: START before the work, then COMPLETE (with what the commit
wrote) or FAIL. Listeners (lineage) hang off the core, so every door gets them.

A listener must never fail or slow a write: `Events` calls them inside try/except, and
listeners that talk to the network are expected to queue and return at once.
"""
from __future__ import annotations

import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, Iterator, Optional, Protocol

from .. import logs
from ..storage import canonical, is_url
from ..warehouse import Warehouse
from .delta_log import commit_info, delta_version, row_counts
from .model import Column

log = logs.get(__name__)


@dataclass(frozen=True)
class TableEvent:
    run_id: str       # one per operation (a UUID)
    door: str         # the front door that asked ("fivetran", "airbyte", "conduit")
    operation: str    # the door's name for it ("WriteBatch", "CreateTable", "Migrate:rename_column" ...)
    schema: str
    table: str
    location: str     # where the table lives (a local path or a storage URL)
    working: bool = False  # a door's working table (e.g. Airbyte's overwrite staging), not a dataset of its own


@dataclass
class TableOutcome:
    """Filled in by the operation as it goes; read by listeners on completion."""

    committed: bool = False                   # did the operation write a Delta commit
    version: Optional[int] = None             # the Delta version it wrote (see committed_version)
    lifecycle: Optional[str] = None           # CREATE, ALTER, TRUNCATE, OVERWRITE, DROP, RENAME (OpenLineage's words)
    columns: tuple[Column, ...] = ()          # the table's columns after the operation
    inserted: Optional[int] = None
    updated: Optional[int] = None
    deleted: Optional[int] = None
    extra: dict = field(default_factory=dict)


def log_reader(warehouse: Optional[Warehouse], location: str) -> Optional[Warehouse]:
    """Where the table's log is read from: the operation's warehouse (with its storage
    options), else -- for callers that name only a location -- the local disk when the
    location is a local path. None when nothing here can read it (an object-store location
    without its warehouse's options)."""
    if warehouse is not None:
        return warehouse
    if location and not is_url(canonical(location)):
        return Warehouse(location)
    return None


def committed_version(warehouse: Optional[Warehouse], location: str) -> Optional[int]:
    """The version a finished commit wrote: the newest in the table's log, read right after
    the operation -- still under the table's lock for writes, DDL and truncates, so no later
    commit of ours can be counted (migrations lock inside their handlers: a concurrent request
    for the same table could be counted there; Fivetran serialises a table's requests).
    `warehouse` may be None for a local location (see `log_reader`). None where the
    destination cannot list the warehouse itself.
    >>> committed_version(None, "s3://bucket/wh/s/t") is None
    True
    """
    reader = log_reader(warehouse, location) if location else None
    if reader is None or not reader.can_list:
        return None
    version = delta_version(reader, canonical(location) if reader.is_local else location)
    return version if version >= 0 else None


def _commit_info(warehouse: Optional[Warehouse], location: str, version: int) -> Optional[dict]:
    """The commitInfo action of the commit `version` of the table at `location` (None when
    absent, unreadable, or where the destination cannot list the warehouse itself);
    `warehouse` may be None for a local location (see `log_reader`)."""
    reader = log_reader(warehouse, location) if location else None
    if reader is None or not reader.can_list:
        return None
    return commit_info(reader, canonical(location) if reader.is_local else location, version)


class Listener(Protocol):
    def started(self, event: TableEvent) -> None: ...

    def completed(self, event: TableEvent, outcome: TableOutcome) -> None: ...

    def failed(self, event: TableEvent, error: BaseException) -> None: ...


class Events:
    def __init__(self, door: str = "core"):
        self.door = door
        self.listeners: list[Listener] = []
        # (schema, table) -> is it one of the door's working tables? Lineage leaves those out:
        # their rows reach a real table in a later operation, which is the one reported.
        self.working_table: Callable[[str, str], bool] = lambda _schema, _table: False

    def _notify(self, method: str, *args) -> None:
        for listener in self.listeners:
            try:
                getattr(listener, method)(*args)
            except Exception as exc:  # noqa: BLE001 - a listener never fails a write
                log.warning(f"a {type(listener).__name__} failed on {method} ({type(exc).__name__}); the write is unaffected")

    @contextmanager
    def operation(self, operation: str, schema: str, table: str, location: str,
                  warehouse: Optional[Warehouse] = None) -> Iterator[TableOutcome]:
        if not self.listeners:
            yield TableOutcome()
            return
        event = TableEvent(str(uuid.uuid4()), self.door, operation, schema, table, location,
                           working=self.working_table(schema, table))
        outcome = TableOutcome()
        self._notify("started", event)
        try:
            yield outcome
        except BaseException as exc:
            self._notify("failed", event, exc)
            raise
        # Reporting only: reading the log (a local disk, or an object store over the network)
        # never fails an operation that has committed.
        if outcome.committed and outcome.version is None:
            try:
                outcome.version = committed_version(warehouse, location)
            except Exception as exc:  # noqa: BLE001
                log.warning(f"the version {operation} committed could not be read ({type(exc).__name__})")
        if outcome.committed and outcome.version is not None and outcome.inserted is not None:
            # A data write: the rows as the engine counted them, where the commit says.
            try:
                counts = row_counts(_commit_info(warehouse, location, outcome.version))
            except Exception as exc:  # noqa: BLE001
                log.warning(f"the row counts of {operation} could not be read ({type(exc).__name__})")
                counts = None
            if counts is not None:
                outcome.inserted, outcome.updated, outcome.deleted = counts
        self._notify("completed", event, outcome)
