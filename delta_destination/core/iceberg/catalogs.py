"""Iceberg catalogs: a name `<schema>.<table>` that leads an Iceberg reader to a table's newest
Iceberg metadata file, kept in step with the mirror (setting `iceberg_catalog_uri`).

The table's own `metadata/` folder stays the Iceberg side's truth (metadata_files.py: the mirror
commits there, put-if-absent, whatever the catalog does). A catalog entry is only a pointer to a
file there, moved after each mirror: so a catalog that is down, slow or wrong never fails a request
nor holds back the Delta commit or the folder; it lags, is logged and counted, and the next commit
moves it (after_commit.py). Which catalog the URI names is the table `CATALOG_KINDS` below; each
kind implements the four entry primitives of `IcebergCatalog` and this module decides, once for all
kinds, when an entry may be created, moved or dropped (`pointer_step`).

Decided (the safe reading of "keep the catalog in step"):
- an entry is moved only forward: never to an older `v<N>` of the same folder while the newer file
  it names still exists (two destination processes publishing out of order);
- an entry that names a file outside the table's `metadata/` folder belongs to someone else and is
  left alone while that file exists (a warning says so); one whose file is gone (a warehouse moved,
  a table dropped outside the destination) is taken over;
- an entry is dropped with its table (drop_table, and the old name of a renamed table: the new name
  is published by the mirror of the table at its new place), and only when it names a file of that
  table's folder.
"""
from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from typing import Callable, Optional
from urllib.parse import urlsplit

from ...errors import InvalidRequest
from ...settings import Settings
from .metadata_files import METADATA_DIR, version_of

REGISTER, MOVE, CURRENT, AHEAD, FOREIGN = "registered", "moved", "current", "ahead", "foreign"


class IcebergCatalog(ABC):
    """One Iceberg catalog (of one URI and name): the entry primitives each kind implements."""

    name: str = "the Iceberg catalog"   # how messages and log lines call it

    @abstractmethod
    def check(self, schema: str, table: str) -> None:
        """Can the catalog hold this name? InvalidRequest with the reason, before anything is written."""

    @abstractmethod
    def entry(self, schema: str, table: str) -> Optional[str]:
        """The metadata location the entry names (None: no entry)."""

    @abstractmethod
    def create_entry(self, schema: str, table: str, metadata_location: str) -> bool:
        """A new entry (its namespace made if missing); False when an entry exists already."""

    @abstractmethod
    def move_entry(self, schema: str, table: str, expected: str, metadata_location: str) -> bool:
        """The entry moved from `expected` to `metadata_location` atomically; False when it no
        longer names `expected` (another writer moved it: read again)."""

    @abstractmethod
    def drop_entry(self, schema: str, table: str, expected: str) -> None:
        """The entry gone if it still names `expected` (nothing to do otherwise)."""


def in_folder(metadata_location: str, table_location: str) -> bool:
    """Does the location name a file of the table's own metadata folder?
    >>> in_folder("/wh/s/t/metadata/v3.metadata.json", "/wh/s/t/")
    True
    >>> in_folder("/wh/s/t2/metadata/v3.metadata.json", "/wh/s/t"), in_folder("/wh/s/t/v3.json", "/wh/s/t")
    (False, False)
    """
    return metadata_location.startswith(f"{table_location.rstrip('/')}/{METADATA_DIR}/")


def _version(location: str) -> Optional[int]:
    try:
        return version_of(location)
    except ValueError:
        return None


def pointer_step(entry: Optional[str], ours: str, table_location: str, exists: Callable[[str], bool]) -> str:
    """What publishing `ours` does to an entry naming `entry` (see the module docstring).
    >>> on_disk = {"/wh/s/t/metadata/v9.metadata.json", "/other/metadata/v1.metadata.json"}.__contains__
    >>> pointer_step(None, "/wh/s/t/metadata/v3.metadata.json", "/wh/s/t", on_disk)
    'registered'
    >>> pointer_step("/wh/s/t/metadata/v3.metadata.json", "/wh/s/t/metadata/v3.metadata.json", "/wh/s/t", on_disk)
    'current'
    >>> pointer_step("/wh/s/t/metadata/v2.metadata.json", "/wh/s/t/metadata/v3.metadata.json", "/wh/s/t", on_disk)
    'moved'
    >>> pointer_step("/wh/s/t/metadata/v9.metadata.json", "/wh/s/t/metadata/v3.metadata.json", "/wh/s/t", on_disk)
    'ahead'
    >>> pointer_step("/wh/s/t/metadata/v8.metadata.json", "/wh/s/t/metadata/v3.metadata.json", "/wh/s/t", on_disk)
    'moved'
    >>> pointer_step("/other/metadata/v1.metadata.json", "/wh/s/t/metadata/v3.metadata.json", "/wh/s/t", on_disk)
    'foreign'
    >>> pointer_step("/gone/metadata/v1.metadata.json", "/wh/s/t/metadata/v3.metadata.json", "/wh/s/t", on_disk)
    'moved'
    """
    if entry is None:
        return REGISTER
    if entry == ours:
        return CURRENT
    if not in_folder(entry, table_location):
        return FOREIGN if exists(entry) else MOVE
    theirs, mine = _version(entry), _version(ours)
    if theirs is not None and mine is not None and theirs > mine and exists(entry):
        return AHEAD
    return MOVE


class ForeignEntry(Exception):
    """The catalog's entry for the name belongs to another table (its file exists outside this
    table's folder): left as it is."""


def publish(catalog: IcebergCatalog, schema: str, table: str, table_location: str, metadata_location: str,
            exists: Callable[[str], bool], attempts: int = 5) -> str:
    """The entry `schema.table` brought to `metadata_location` (one of the step names above;
    raises ForeignEntry when the name is another table's)."""
    for _ in range(attempts):
        entry = catalog.entry(schema, table)
        step = pointer_step(entry, metadata_location, table_location, exists)
        if step == FOREIGN:
            raise ForeignEntry(f"{catalog.name} already names another table {schema}.{table}")
        if step in (CURRENT, AHEAD):
            return step
        done = (catalog.create_entry(schema, table, metadata_location) if step == REGISTER
                else catalog.move_entry(schema, table, entry, metadata_location))
        if done:
            return step
    raise RuntimeError(f"{catalog.name}: the entry kept changing under {attempts} attempts to move it")


def forget(catalog: IcebergCatalog, schema: str, table: str, table_location: str) -> bool:
    """The entry `schema.table` dropped if it names a file of the table at `table_location`."""
    entry = catalog.entry(schema, table)
    if entry is None or not in_folder(entry, table_location):
        return False
    catalog.drop_entry(schema, table, entry)
    return True


def _sql(settings: Settings) -> IcebergCatalog:
    from .sql_catalog import SqlIcebergCatalog
    return SqlIcebergCatalog(settings.iceberg_catalog_uri, settings.iceberg_catalog_name)


def _hive(settings: Settings) -> IcebergCatalog:
    from .hive_catalog import HiveIcebergCatalog
    return HiveIcebergCatalog(settings.iceberg_catalog_uri)


def _rest(settings: Settings) -> IcebergCatalog:
    from .rest_catalog import RestIcebergCatalog
    return RestIcebergCatalog(settings.iceberg_catalog_uri, settings.iceberg_catalog_name)


# URI scheme of iceberg_catalog_uri (before any "+driver") -> the catalog kind. SQLAlchemy URLs are
# pyiceberg's SQL catalog, whose tables are those of Iceberg's own JdbcCatalog (Java readers open
# the same database with it); http(s) URLs an Iceberg REST catalog.
CATALOG_KINDS: dict[str, Callable[[Settings], IcebergCatalog]] = {
    "sqlite": _sql, "postgresql": _sql, "mysql": _sql,
    "thrift": _hive,
    "http": _rest, "https": _rest,
}

_CATALOGS: dict[tuple[str, str], IcebergCatalog] = {}   # one per URI and name: SQL engines pool connections
_CATALOGS_LOCK = threading.Lock()


def catalog_kind(uri: str) -> Optional[str]:
    """
    >>> catalog_kind("postgresql+psycopg://h/db"), catalog_kind("sqlite:////var/c.db"), catalog_kind("ftp://x")
    ('postgresql', 'sqlite', None)
    >>> catalog_kind("HTTPS://catalog.example/api")
    'https'
    """
    scheme = urlsplit(uri).scheme.lower().split("+", 1)[0]
    return scheme if scheme in CATALOG_KINDS else None


def iceberg_catalog_for(settings: Settings) -> Optional[IcebergCatalog]:
    """The Iceberg catalog of these settings (None: `iceberg_catalog_uri` empty)."""
    uri = settings.iceberg_catalog_uri
    if not uri:
        return None
    kind = catalog_kind(uri)
    if kind is None:
        raise InvalidRequest("iceberg_catalog_uri names no Iceberg catalog the destination knows")
    key = (uri, settings.iceberg_catalog_name)
    with _CATALOGS_LOCK:
        if key not in _CATALOGS:
            _CATALOGS[key] = CATALOG_KINDS[kind](settings)
        return _CATALOGS[key]
