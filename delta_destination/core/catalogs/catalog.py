"""The catalog interface: where tables are registered so that readers find them by name.

"Catalog" means this in the code, and only this: a service outside the warehouse (a Hive
Metastore today; an Iceberg REST catalog, Unity Catalog or Glue are the next candidates) that
maps `<schema>.<table>` to a Delta table's location for query engines. The Delta log stays the
truth of a table; a catalog only points at it. Which catalog a request's settings name is
decided in kinds.py; the core keeps it in step with the tables through registered.py.

An implementation is bound to one request's settings (its engine, its storage) and does its
engine work through the router's catalog lease (engines/router.py), never by opening an engine.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Optional


class Catalog(ABC):
    """A catalog of the tables of one request's settings (see the module docstring)."""

    name: str = "catalog"   # how messages and log lines call it ("the Hive Metastore")

    @abstractmethod
    def check(self, schema: str, table: str) -> None:
        """Before a table is created or renamed to this name: can the catalog hold it? Raises
        InvalidRequest with the reason, before anything is written."""

    @abstractmethod
    def register(self, schema: str, table: str, location: str) -> None:
        """An entry `schema.table` for the Delta table at `location` (idempotent: a replay finds it)."""

    @abstractmethod
    def rename(self, schema: str, old: str, new: str, location: str) -> None:
        """The entry `schema.old` is now `schema.new`, for the table at `location`."""

    @abstractmethod
    def drop(self, schema: str, table: str) -> None:
        """The entry is gone (the data is the destination's business; nothing to do when absent)."""

    @abstractmethod
    def describe(self, schema: str, table: str) -> Optional[str]:
        """The location the catalog gives readers for `schema.table` (None: no entry)."""
