"""Catalogs: where tables are registered so that readers find them by name.

    catalog.py     the interface (Catalog: check, register, rename, drop, describe)
    hive.py        the Hive Metastore (catalog_uri thrift://...), its first implementation
    kinds.py       which catalog a request's settings name (CATALOGS, by catalog_uri's scheme)
    registered.py  what the core's operations call: keeps the settings' catalog in step with the tables
"""
from .catalog import Catalog
from .kinds import CATALOGS, catalog_for
from .registered import RegisteredTables

__all__ = ["CATALOGS", "Catalog", "RegisteredTables", "catalog_for"]
