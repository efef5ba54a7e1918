"""The Hive Metastore as a catalog (catalog.py), the first implementation.

With `catalog_uri` a thrift:// URI, every table the destination creates is registered as an
external Delta table `<schema>.<table>` at its location, and every change that moves or removes a
table (rename, drop, copy) keeps the metastore in step in the same request.

Registration is done by an Apache Spark engine whose session catalog is that metastore (Spark's own
Hive support writes the entry the way every Spark, Trino and Hive reader expects it): the router's
catalog lease gives that engine (a local one is started with the metastore's settings,
engines/spark_process.py; a remote Spark Connect server must have been started with them: README,
"A Spark cluster and a catalog"). Sail cannot register tables.

Names: the metastore keeps database and table names in lower case and accepts ASCII letters,
digits and `_` (Hive's MetaStoreUtils.validateName); a name it cannot hold is refused before
anything is written, with the reason. Tables that differ only in case are refused anyway
(registry.TableRegistry.check_new_name).
"""
from __future__ import annotations

import re
from contextlib import contextmanager
from typing import Iterator, Optional

from ... import logs
from ...engines.router import EngineRouter, EngineSession
from ...errors import InvalidRequest
from ...settings import Settings
from .catalog import Catalog

log = logs.get(__name__)

HIVE_NAME = re.compile(r"^[A-Za-z0-9_]{1,128}$")


def hive_name(kind: str, name: str, held_as: str = "registered in the Hive Metastore (catalog_uri is set)",
              otherwise: str = "leave catalog_uri empty to keep tables as paths only") -> str:
    """The metastore's name for a schema or table (lower case), or InvalidRequest saying what the
    name cannot be (`held_as`) and what to do instead of renaming (`otherwise`): the Iceberg Hive
    catalog (core/iceberg/hive_catalog.py) holds names by the same rule.
    >>> hive_name("table", "Orders_2024")
    'orders_2024'
    """
    if not HIVE_NAME.match(name):
        raise InvalidRequest(
            f"{kind} name {name!r} cannot be {held_as}: the metastore holds names of ASCII letters, digits and _ "
            f"only, at most 128 characters. Rename the {kind}, or {otherwise}")
    return name.lower()


def location_of(described: list[tuple]) -> Optional[str]:
    """The Location row of DESCRIBE TABLE EXTENDED's (col_name, data_type, comment) rows.
    >>> location_of([("id", "int", None), ("", "", ""), ("Location", "s3a://b/wh/s/t", "")])
    's3a://b/wh/s/t'
    >>> location_of([("id", "int", None)]) is None
    True
    """
    return next((row[1] for row in described if row and row[0] == "Location"), None)


class HiveMetastore(Catalog):
    """The metastore of `settings.catalog_uri`, for one request's settings."""

    name = "the Hive Metastore"

    def __init__(self, settings: Settings, router: EngineRouter):
        self.settings = settings
        self.router = router

    @contextmanager
    def _session(self) -> Iterator[EngineSession]:
        """The engine whose session catalog is the metastore (the router knows which), leased."""
        with self.router.catalog_lease(self.settings) as lease:
            yield lease.session

    def check(self, schema: str, table: str) -> None:
        hive_name("schema", schema)
        hive_name("table", table)

    def register(self, schema: str, table: str, location: str) -> None:
        db, name = hive_name("schema", schema), hive_name("table", table)
        with self._session() as eng:
            eng.register_entry(db, name, location)
        log.info(f"table {schema}.{table} registered in the metastore as {db}.{name}")

    def drop(self, schema: str, table: str) -> None:
        if not (HIVE_NAME.match(schema) and HIVE_NAME.match(table)):
            return  # never registered
        with self._session() as eng:
            eng.drop_entry(schema.lower(), table.lower())
        log.info(f"table {schema}.{table} removed from the metastore")

    def rename(self, schema: str, old: str, new: str, location: str) -> None:
        """As a drop and a register (both idempotent: a replay of a half-done rename completes it)."""
        self.drop(schema, old)
        self.register(schema, new, location)

    def describe(self, schema: str, table: str) -> Optional[str]:
        if not (HIVE_NAME.match(schema) and HIVE_NAME.match(table)):
            return None
        with self._session() as eng:
            rows = eng.entry_rows(schema.lower(), table.lower())
        return location_of(rows) if rows is not None else None
