"""Tables registered in a Hive Metastore, so that people query them by name.

With `catalog_uri` set, every table the destination creates is registered as an external
Delta table `<schema>.<table>` at its location, and every change that moves or removes a
table (rename, drop, copy) keeps the metastore in step in the same request. Without it
nothing here runs: tables are paths only.

Registration is done by an Apache Spark engine whose catalog is that metastore (Spark's own
Hive support writes the entry the way every Spark, Trino and Hive reader expects it): the
local engine is started with it (spark_process.py), a remote Spark Connect server must have
been started with it (README, "A Spark cluster and a catalog"). Sail cannot register tables.

Names: the metastore keeps database and table names in lower case and accepts ASCII letters,
digits and `_` (Hive's MetaStoreUtils.validateName); a name it cannot hold is refused before
anything is written, with the reason. Tables that differ only in case are refused anyway
(catalog.TableRegistry.check_new_name). Door working tables (Airbyte's overwrite staging) are not
registered: their rows reach a real table in a later operation.
"""
from __future__ import annotations

import re
from contextlib import contextmanager
from typing import Callable, Iterator

from .. import logs
from ..engines.router import EngineRouter, EngineSession
from ..errors import InvalidRequest
from ..settings import Settings
from .sql import create_database_sql, register_external_sql, unregister_sql

log = logs.get(__name__)

METASTORE_NAME = re.compile(r"^[A-Za-z0-9_]{1,128}$")


def catalog_name(kind: str, name: str) -> str:
    """The metastore's name for a schema or table (lower case), or InvalidRequest.
    >>> catalog_name("table", "Orders_2024")
    'orders_2024'
    """
    if not METASTORE_NAME.match(name):
        raise InvalidRequest(
            f"{kind} name {name!r} cannot be registered in the Hive Metastore (catalog_uri is set): the metastore "
            f"holds names of ASCII letters, digits and _ only, at most 128 characters. Rename the {kind}, or leave "
            f"catalog_uri empty to keep tables as paths only")
    return name.lower()


class Metastore:
    """Keeps the metastore in step with the tables (a no-op without `catalog_uri`)."""

    def __init__(self, router: EngineRouter, working_table: Callable[[str, str], bool]):
        self.router = router
        self.working_table = working_table

    @staticmethod
    def enabled(settings: Settings) -> bool:
        return bool(settings.catalog_uri)

    def _applies(self, settings: Settings, schema: str, table: str) -> bool:
        return self.enabled(settings) and not self.working_table(schema, table)

    def check(self, settings: Settings, schema: str, table: str) -> None:
        """Before a table is created or renamed to this name: can it be registered?"""
        if self._applies(settings, schema, table):
            catalog_name("schema", schema)
            catalog_name("table", table)

    @contextmanager
    def session(self, settings: Settings) -> Iterator[EngineSession]:
        """The engine whose catalog is the metastore (the router knows which), leased."""
        with self.router.catalog_lease(settings) as lease:
            yield lease.session

    def register(self, settings: Settings, schema: str, table: str, location: str) -> None:
        """An external Delta table entry `schema.table` at `location` (a replay finds it there)."""
        if not self._applies(settings, schema, table):
            return
        db, name = catalog_name("schema", schema), catalog_name("table", table)
        with self.session(settings) as eng:
            eng.execute(f"register database {db} in the metastore", create_database_sql(db))
            eng.execute(f"register table {db}.{name} in the metastore",
                        register_external_sql(db, name, eng.path(location)))
        log.info(f"table {schema}.{table} registered in the metastore as {db}.{name}")

    def unregister(self, settings: Settings, schema: str, table: str) -> None:
        """The entry is gone (an external table: the data is the destination's business)."""
        if not self._applies(settings, schema, table):
            return
        db, name = schema.lower(), table.lower()
        if not (METASTORE_NAME.match(schema) and METASTORE_NAME.match(table)):
            return  # never registered
        with self.session(settings) as eng:
            eng.execute(f"unregister table {db}.{name} from the metastore", unregister_sql(db, name))
        log.info(f"table {schema}.{table} removed from the metastore")

    def moved(self, settings: Settings, schema: str, old: str, new: str, location: str) -> None:
        self.unregister(settings, schema, old)
        self.register(settings, schema, new, location)
