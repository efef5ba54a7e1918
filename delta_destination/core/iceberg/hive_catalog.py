"""Iceberg's Hive catalog (a Hive Metastore, `iceberg_catalog_uri` thrift://host:port) as the place of
the entries of catalogs.py: an EXTERNAL Hive table `<schema>.<table>` whose parameters
`table_type=ICEBERG` and `metadata_location` are what Iceberg's HiveCatalog (Java, pyiceberg, Trino,
Hive 4 itself) reads to open the table.

Spoken over the metastore's Thrift API directly (the `hive_metastore` client pyiceberg brings), one
connection per call, not through pyiceberg's HiveCatalog:
- its `register_table` reads the metadata file back through pyiceberg's own FileIO, which the store
  settings of a request do not configure (file_io.py);
- pyiceberg 0.12 looks tables up with the Thrift call `get_table`, which Hive 4.0.1 removed (HIVE-26537;
  apache/iceberg-python#1222): `get_table_req` is here, in every metastore since Hive 2.3;
- its commits take a metastore lock, which a metastore without Hive's transaction tables refuses
  (measured on the standalone metastore 4.0.1 with Derby: "Internal error processing lock").

The move is the compare-and-set of Iceberg Java's HiveTableOperations with locks off (HIVE-26882):
`alter_table_with_environment_context` with `expected_parameter_key=metadata_location` and
`expected_parameter_value=<expected>`; the metastore checks the stored value in the alter's own
transaction and answers MetaException "The table has been modified..." when it differs (measured on
4.0.1: of 6 clients altering from the same value at once, exactly one succeeds, each of 5 rounds). A
metastore older than that ignores the context and the move is a plain last-writer-wins alter.

The entry holds no columns: Iceberg readers take the schema from the metadata file, and columns
here would be a second copy to keep in step. Its storage location is the table's folder in Hadoop's
spelling (s3a:// for s3://), because the metastore, a Hadoop process, checks that folder (and makes it
when missing); `metadata_location` is the mirror's own URL, unchanged.

Decided: a Hive table of that name that is not an Iceberg table (no `table_type=ICEBERG`: a Delta or
Hive table of someone else) is no entry of ours and is never altered nor dropped: `entry` answers
None for it (so dropping our table has nothing to drop there and never fails on it), and
`create_entry` raises NotAnIcebergEntry, a ForeignEntry, so publishing leaves the name as it is with
the warning of any foreign entry. The metastore has no conditional drop (a drop ignores the
expected-value context, measured): `drop_entry` reads the entry and drops it only when it still names
`expected`, one round trip apart.
"""
from __future__ import annotations

import getpass
import time
from typing import Optional
from urllib.parse import urlsplit

from hive_metastore.ThriftHiveMetastore import Client
from hive_metastore.ttypes import (
    AlreadyExistsException,
    Database,
    EnvironmentContext,
    GetTableRequest,
    MetaException,
    NoSuchObjectException,
    SerDeInfo,
    StorageDescriptor,
)
from hive_metastore.ttypes import Table as HiveTable
from thrift.protocol import TBinaryProtocol
from thrift.transport import TSocket, TTransport

from ...errors import InvalidRequest
from ...storage import store_for
from ..catalogs.hive import hive_name
from .catalogs import ForeignEntry, IcebergCatalog
from .metadata_files import METADATA_DIR

TABLE_TYPE, ICEBERG = "table_type", "ICEBERG"
METADATA_LOCATION, PREVIOUS_METADATA_LOCATION = "metadata_location", "previous_metadata_location"
EXPECTED_KEY, EXPECTED_VALUE = "expected_parameter_key", "expected_parameter_value"   # HIVE-26882
# As Iceberg's HiveCatalogs alter: the metastore computes no file statistics for the table's folder.
NO_STATS = {"DO_NOT_UPDATE_STATS": "true"}
DEFAULT_PORT = 9083
TIMEOUT_MS = 30_000   # a metastore that stops answering fails the call, never hangs the mirror's step


class HiveCatalogUnavailable(RuntimeError):
    """The metastore did not answer (refused, unreachable, timed out): the entry lags (catalogs.py)."""


class NotAnIcebergEntry(ForeignEntry):
    """The metastore's table of that name is no Iceberg table (left as it is)."""


def hive_table_name(kind: str, name: str) -> str:
    """The metastore's name (lower case), or InvalidRequest.
    >>> hive_table_name("table", "Orders_2024")
    'orders_2024'
    """
    return hive_name(kind, name, held_as="an entry of the Iceberg Hive catalog (iceberg_catalog_uri)",
                     otherwise="use a SQL catalog for the Iceberg entries")


def table_folder(metadata_location: str) -> str:
    """The table's folder of a file of its metadata folder.
    >>> table_folder("s3://b/wh/s/t/metadata/00003-x.metadata.json")
    's3://b/wh/s/t'
    """
    folder, sep, _ = metadata_location.rpartition(f"/{METADATA_DIR}/")
    if not sep:
        raise ValueError(f"not a file of a table's {METADATA_DIR}/ folder: {metadata_location}")
    return folder


def hadoop_location(location: str) -> str:
    """How the metastore (Hadoop's file systems) spells a location: as Spark does, its store says.
    >>> hadoop_location("s3://b/wh/t"), hadoop_location("/data/wh/t"), hadoop_location("gs://b/wh/t")
    ('s3a://b/wh/t', '/data/wh/t', 'gs://b/wh/t')
    """
    return store_for(location).spark_path(location)


def iceberg_hive_table(db: str, name: str, metadata_location: str, owner: str, now: int) -> HiveTable:
    """The metastore's table of a new entry (pure): external, parameters as Iceberg's HiveCatalog writes
    them, no columns (see the module docstring)."""
    sd = StorageDescriptor(
        cols=[], location=hadoop_location(table_folder(metadata_location)),
        inputFormat="org.apache.hadoop.mapred.FileInputFormat", outputFormat="org.apache.hadoop.mapred.FileOutputFormat",
        serdeInfo=SerDeInfo(serializationLib="org.apache.hadoop.hive.serde2.lazy.LazySimpleSerDe"))
    return HiveTable(dbName=db, tableName=name, owner=owner, createTime=now, lastAccessTime=now, sd=sd,
                     tableType="EXTERNAL_TABLE",
                     parameters={"EXTERNAL": "TRUE", TABLE_TYPE: ICEBERG, METADATA_LOCATION: metadata_location})


def owner() -> str:
    """The entry's owner: this process's user, as Iceberg's HiveCatalogs write it; a fixed name where
    the user has no name (a container's arbitrary uid: getpass raises there)."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "delta_destination"


def is_iceberg(table: HiveTable) -> bool:
    return (table.parameters or {}).get(TABLE_TYPE, "").upper() == ICEBERG


def thrift_address(uri: str) -> tuple[str, int]:
    """
    >>> thrift_address("thrift://hms.internal:9083"), thrift_address("thrift://hms")
    (('hms.internal', 9083), ('hms', 9083))
    """
    u = urlsplit(uri)
    if not u.hostname:
        raise InvalidRequest("iceberg_catalog_uri: a Hive Metastore URI is thrift://host:port")
    return u.hostname, u.port or DEFAULT_PORT


class Connection:
    """One Thrift connection to the metastore, for one entry primitive: `with Connection(...) as client`.

    A class, not a @contextmanager generator: contextlib sets `__traceback__` on an exception that
    leaves the block, and the metastore's exceptions (hive_metastore's MetaException, ...) are immutable
    Thrift structs that answer it with TypeError "can't modify immutable instance" (measured: a
    MetaException of create_table arrived as that TypeError). Here they leave the block as themselves;
    a connection that fails (refused, unreachable, timed out, closed) is HiveCatalogUnavailable."""

    def __init__(self, host: str, port: int, name: str):
        self.host, self.port, self.name = host, port, name
        sock = TSocket.TSocket(host, port)
        sock.setTimeout(TIMEOUT_MS)
        self.transport = TTransport.TBufferedTransport(sock)

    def _unavailable(self, e: BaseException) -> HiveCatalogUnavailable:
        return HiveCatalogUnavailable(f"{self.name} at {self.host}:{self.port} did not answer: {e}")

    def __enter__(self) -> Client:
        try:
            self.transport.open()
        except (TTransport.TTransportException, OSError) as e:
            raise self._unavailable(e) from e
        return Client(TBinaryProtocol.TBinaryProtocol(self.transport))

    def __exit__(self, kind, e, tb) -> None:
        self.transport.close()
        if isinstance(e, (TTransport.TTransportException, OSError)):
            raise self._unavailable(e) from e


class HiveIcebergCatalog(IcebergCatalog):
    name = "the Iceberg Hive catalog"

    def __init__(self, uri: str):
        self.host, self.port = thrift_address(uri)

    def _client(self) -> Connection:
        return Connection(self.host, self.port, self.name)

    @staticmethod
    def _table(client: Client, db: str, name: str) -> Optional[HiveTable]:
        try:
            return client.get_table_req(GetTableRequest(dbName=db, tblName=name)).table
        except NoSuchObjectException:   # no such table, or no such database
            return None

    def _iceberg_table(self, client: Client, schema: str, table: str) -> Optional[HiveTable]:
        """The metastore's table of that name when it is an Iceberg table (None: none, or not Iceberg)."""
        found = self._table(client, hive_table_name("schema", schema), hive_table_name("table", table))
        return found if found is not None and is_iceberg(found) else None

    def check(self, schema: str, table: str) -> None:
        hive_table_name("schema", schema)
        hive_table_name("table", table)

    def entry(self, schema: str, table: str) -> Optional[str]:
        with self._client() as client:
            found = self._iceberg_table(client, schema, table)
        return (found.parameters or {}).get(METADATA_LOCATION) if found is not None else None

    def create_entry(self, schema: str, table: str, metadata_location: str) -> bool:
        db, name = hive_table_name("schema", schema), hive_table_name("table", table)
        with self._client() as client:
            try:
                client.get_database(db)
            except NoSuchObjectException:
                try:
                    client.create_database(Database(name=db))
                except AlreadyExistsException:
                    pass   # another writer made it
            try:
                client.create_table(iceberg_hive_table(db, name, metadata_location, owner(), int(time.time())))
            except AlreadyExistsException:
                there = self._table(client, db, name)
                if there is not None and not is_iceberg(there):
                    raise NotAnIcebergEntry(f"{self.name} holds {db}.{name} as a table that is not an Iceberg "
                                            "table: left as it is") from None
                return False
        return True

    def move_entry(self, schema: str, table: str, expected: str, metadata_location: str) -> bool:
        with self._client() as client:
            found = self._iceberg_table(client, schema, table)
            if found is None or (found.parameters or {}).get(METADATA_LOCATION) != expected:
                return False
            found.parameters = {**found.parameters, METADATA_LOCATION: metadata_location,
                                PREVIOUS_METADATA_LOCATION: expected}
            context = EnvironmentContext(properties={EXPECTED_KEY: METADATA_LOCATION, EXPECTED_VALUE: expected, **NO_STATS})
            try:
                client.alter_table_with_environment_context(found.dbName, found.tableName, found, context)
            except MetaException as e:
                # The compare-and-set failed (the value moved, or moved and came back: "The table has been
                # modified"), or the alter did for another reason: only the first is an answer.
                now = self._table(client, found.dbName, found.tableName)
                current = (now.parameters or {}).get(METADATA_LOCATION) if now is not None else None
                if current != expected or "has been modified" in (e.message or ""):
                    return False
                raise
        return True

    def drop_entry(self, schema: str, table: str, expected: str) -> None:
        with self._client() as client:
            found = self._iceberg_table(client, schema, table)
            if found is None or (found.parameters or {}).get(METADATA_LOCATION) != expected:
                return
            try:
                client.drop_table(found.dbName, found.tableName, False)   # deleteData=False: the entry only
            except NoSuchObjectException:
                pass   # another writer dropped it
