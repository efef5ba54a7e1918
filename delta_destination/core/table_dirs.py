"""Where a warehouse's tables are, as their Delta logs tell: a table's directory (the spelled one,
or the legacy one that already holds the table), another table of a schema equal ignoring case,
every table, and removing what a failed create or write left where no commit made a table.

The warehouse (warehouse.py) knows how locations are spelled, the store how files are listed;
which folder holds a table is the Delta log's to say (delta_log.has_commits), so these live in
the core, above both.
"""
from __future__ import annotations

from functools import partial
from typing import Iterator, Optional

from ..names import path_component, same_ignoring_case
from ..warehouse import Warehouse
from .delta_log import has_commits


def table_location(warehouse: Warehouse, schema: str, table: str) -> str:
    """The table's directory: its spelled location, unless only its legacy one holds a table."""
    location = warehouse.spelled_location(schema, table)
    legacy = warehouse.legacy_location(schema, table)
    if legacy is not None and not has_commits(warehouse, location) and has_commits(warehouse, legacy):
        return legacy
    return location


def case_twin(warehouse: Warehouse, schema: str, table: str) -> Optional[str]:
    """Another table of the schema whose name equals `table` ignoring case (its directory
    name), or None. Spark and most catalogs and readers resolve names case-insensitively,
    so such a pair is refused."""
    if not warehouse.can_list:
        return None
    mine = path_component(table)
    for entry in sorted(warehouse.storage.list(warehouse.schema_location(schema)), key=lambda e: e.name):
        if entry.is_dir and entry.name != mine and same_ignoring_case(entry.name, table) \
                and has_commits(warehouse, entry.location):
            return entry.name
    return None


def table_locations(warehouse: Warehouse) -> Iterator[tuple[str, str, str]]:
    """(schema directory, table directory, location) of every Delta table."""
    if not warehouse.can_list:
        return
    storage = warehouse.storage
    for schema in sorted(storage.list(warehouse.root), key=lambda e: e.name):
        if not schema.is_dir or schema.name.startswith((".", "_fivetran_")):
            continue
        for table in sorted(storage.list(schema.location), key=lambda e: e.name):
            if table.is_dir and not table.name.startswith(".") and has_commits(warehouse, table.location):
                yield schema.name, table.name, table.location


def remove_failed_create(warehouse: Warehouse, location: str) -> None:
    """A crash during CREATE can leave a table folder without commits or data: remove it (a
    folder with data files but no log is not ours to judge and stays)."""
    if has_commits(warehouse, location):
        return
    storage = warehouse.storage
    entries = storage.list(location, recursive=True)
    if any(not e.is_dir and e.name.endswith(".parquet") for e in entries):
        return
    if entries or storage.exists(location):
        storage.delete_tree(location)


def remove_uncommitted(warehouse: Warehouse, location: str) -> None:
    """Files a failed write left where no commit made them a table."""
    if not has_commits(warehouse, location):
        warehouse.storage.delete_tree(location)


def clean_leftovers(warehouse: Warehouse, everything_dead: bool = False) -> int:
    """What dead processes left in the warehouse's private areas, removed (private_areas.py);
    a noted removal of a folder that never became a table is skipped once a commit made it one."""
    return warehouse.private_areas.clean_leftovers(partial(has_commits, warehouse), everything_dead)
