"""The warehouse's layout: its root and store, and where schemas and tables live in it.

A table lives at `<warehouse>/<schema dir>/<table dir>`, each directory name spelled from the
Fivetran name by names.path_component (`directory_name` also refuses unsafe names and the
schema names of the destination's private areas, private_areas.py). Tables created before
this layout whose names had other characters the engine kept literally (`$`, `+`, `@` ...)
are still found at their old directory (legacy_location, local warehouses; which of the two
holds the table is the Delta log's to say: core/table_dirs.py).

The warehouse root is a local directory or an object-store URL (`s3://bucket/prefix`; see
storage/). The destination lists and removes files there itself through `storage`; directory
renames exist only on a local disk (`can_rename`), and callers choose their design by it.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional

from .errors import UnsafeName
from .names import ESCAPE, check_path_name, path_component
from .private_areas import RESERVED_SCHEMAS, TMP_PREFIX, PrivateAreas
from .storage import Storage, StorageOptions, canonical, delta_rs_options, is_url, storage_for, store_for

__all__ = ["Warehouse", "normalise_root", "directory_name"]


def normalise_root(path: str) -> str:
    return canonical(path)


def directory_name(kind: str, name: str) -> str:
    """The path component for a schema or table name (refused when unsafe or reserved)."""
    check_path_name(kind, name)
    if kind == "schema" and name in RESERVED_SCHEMAS:
        raise UnsafeName(f"{kind} name {name!r} is reserved for the destination's own files")
    return path_component(name)


@dataclass(frozen=True)
class Warehouse:
    root: str
    options: StorageOptions = StorageOptions()

    def __post_init__(self):
        object.__setattr__(self, "root", canonical(self.root))

    @property
    def storage(self) -> Storage:
        return storage_for(self.root, self.options)

    @property
    def private_areas(self) -> PrivateAreas:
        return PrivateAreas(self)

    def delta_rs_path(self, location: str) -> str:
        """A location of this warehouse as delta-rs spells it (its store's object_store form)."""
        return store_for(location).object_store_path(location)

    def delta_rs_options(self) -> dict[str, str]:
        """delta-rs `storage_options` of this warehouse's store."""
        return delta_rs_options(self.root, self.options)

    @property
    def is_local(self) -> bool:
        return not is_url(self.root)

    @property
    def can_list(self) -> bool:
        """Can the destination list and remove files here itself (local disks, S3)?"""
        return self.storage.can_list

    @property
    def can_rename(self) -> bool:
        """Atomic directory renames exist on a local disk only."""
        return self.is_local

    def join(self, *parts: str) -> str:
        if self.is_local:
            return os.path.join(self.root, *parts)
        return "/".join([self.root.rstrip("/"), *parts])

    def schema_location(self, schema: str) -> str:
        return self.join(directory_name("schema", schema))

    def spelled_location(self, schema: str, table: str) -> str:
        """Where a table of this name lives in the spelled layout (names.path_component). A table
        created before it may still be at its `legacy_location`: which one holds the table, the
        Delta log says (core/table_dirs.py `table_location`)."""
        return self.join(directory_name("schema", schema), directory_name("table", table))

    def legacy_location(self, schema: str, table: str) -> Optional[str]:
        """Where a table with this name was created before names were spelled (raw names as
        directories), when that differs; local warehouses only. Names with "=" are left out:
        their raw spelling could be another table's new one."""
        if not self.is_local or ESCAPE in schema + table or table.startswith(TMP_PREFIX):
            return None
        if path_component(schema) == schema and path_component(table) == table:
            return None
        if len(schema.encode("utf-8")) > 255 or len(table.encode("utf-8")) > 255:
            return None
        return os.path.join(self.root, schema, table)

    def join_location(self, location: str, *parts: str) -> str:
        if self.is_local:
            return os.path.join(location, *parts)
        return "/".join([location.rstrip("/"), *parts])
