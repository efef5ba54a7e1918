"""A table's entry in the Iceberg catalog of its settings (`iceberg_catalog_uri`, catalogs.py), as the
core keeps it: its name checked before a table is created or renamed to it, moved after each
mirror (after_commit.py), dropped with its table (core/catalogs/registered.py).

Decided: moving the entry never fails a request: the Delta commit and the metadata folder stand;
a failed move is logged without values, counted, and made by the next commit. Dropping it does
fail the drop or rename that needs it gone (a replay finishes it), so that no entry names a
table that is no longer there.
"""
from __future__ import annotations

from typing import Optional, Tuple

from ... import logs, metrics
from ...settings import ICEBERG_OFF, Settings
from ...warehouse import Warehouse

log = logs.get(__name__)
# catalogs.py (and pyiceberg under it) is imported only where a catalog is set: without one this
# module is all the core loads of it.


def _has_catalog(settings: Settings) -> bool:
    return settings.iceberg != ICEBERG_OFF and bool(settings.iceberg_catalog_uri)


def check_entry_name(settings: Settings, schema: str, table: str) -> None:
    """Before a table is created or renamed to this name: can the Iceberg catalog hold it?
    (InvalidRequest with the reason, before anything is written.)"""
    if _has_catalog(settings):
        from .catalogs import iceberg_catalog_for
        iceberg_catalog_for(settings).check(schema, table)


def publish_entry(settings: Settings, warehouse: Warehouse, display: str, location: str, entry: Tuple[str, str],
                  metadata_location: str) -> Optional[str]:
    """The table's Iceberg catalog entry brought to `metadata_location` (the step taken; None: it
    failed, logged without values, and the next commit tries again)."""
    from .catalogs import ForeignEntry, iceberg_catalog_for, publish
    schema, table = entry
    try:
        catalog = iceberg_catalog_for(settings)
        step = publish(catalog, schema, table, location, metadata_location, exists_in(warehouse, location))
    except ForeignEntry:
        log.warning(f"{display}: the Iceberg catalog holds another table under this name; it is left "
                    "as it is (drop it there, or rename one of the tables, to have the entry follow this table)")
        metrics.iceberg_catalog_entry("foreign")
        return None
    except Exception as e:  # noqa: BLE001 - the commit and the metadata folder stand whatever the catalog raised
        log.warning(f"{display}: Iceberg catalog entry not moved to the newest metadata ({type(e).__name__}); "
                    "readers through the catalog see an older Iceberg snapshot until the next commit moves it")
        log.debug(f"{display}: Iceberg catalog failure: {type(e).__name__}")
        metrics.iceberg_catalog_entry("failed")
        return None
    metrics.iceberg_catalog_entry(step)
    if step != "current":
        log.info(f"{display}: Iceberg catalog entry {step}" + (" (another writer published a newer one)"
                                                                if step == "ahead" else ""))
    return step


def exists_in(warehouse: Warehouse, location: str):
    """Does a metadata file an entry names exist? (True when it cannot be told: a file on another
    store is then taken for another table's, and left alone.)"""
    from .file_io import file_io
    io = file_io(warehouse, location)

    def exists(path: str) -> bool:
        try:
            return io.new_input(path).exists()
        except Exception:  # noqa: BLE001 - unreadable from here: assume it is there
            return True
    return exists


def forget_entry(settings: Settings, schema: str, table: str, location: str) -> None:
    """The Iceberg catalog entry of a table that is dropped or renamed away from this name, dropped
    when it names the table's metadata (raises on a catalog failure: the request fails and its
    replay drops it)."""
    if not _has_catalog(settings):
        return
    from .catalogs import forget, iceberg_catalog_for
    if forget(iceberg_catalog_for(settings), schema, table, location):
        log.info(f"{schema}.{table}: Iceberg catalog entry dropped")
