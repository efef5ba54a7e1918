"""The Iceberg Hive catalog (core/iceberg/hive_catalog.py) against a real Hive standalone metastore 4.0.1
(the `hive_metastore` fixture: the metastore JVM alone, Thrift on loopback): the entry primitives and
the metastore's compare-and-set, a table of the same name that is not an Iceberg table, the
metastore's own refusals; catalogs.publish/forget end to end for tables the session's server wrote
with Iceberg on, and the server's own entries (iceberg_catalog_uri thrift://) through commits, a
rename, a drop, a metastore that is down, a name the metastore cannot hold; a table on S3 through a
metastore with S3A. Each table is opened through the catalog as an Iceberg reader opens it
(pyiceberg's HiveCatalog) and compared with the Delta table read by delta-rs.

Each metastore entry is also read with a Thrift client of the test's own (`hms`), not through the
module under test."""
from __future__ import annotations

import os
import socket
import threading
from contextlib import contextmanager
from urllib.parse import urlsplit

import grpc
import pytest
from hive_metastore.ThriftHiveMetastore import Client
from hive_metastore.ttypes import (
    FieldSchema,
    GetTableRequest,
    MetaException,
    NoSuchObjectException,
    SerDeInfo,
    StorageDescriptor,
)
from hive_metastore.ttypes import Table as HiveTable
from pyiceberg.catalog.hive import HiveCatalog
from pyiceberg.exceptions import NoSuchTableError
from thrift.protocol import TBinaryProtocol
from thrift.transport import TSocket, TTransport

from delta_destination.core.iceberg import catalogs
from delta_destination.core.iceberg.hive_catalog import HiveIcebergCatalog, NotAnIcebergEntry
from delta_destination.doors.fivetran._proto import destination_sdk_pb2 as pb
from testkit.delta_read import read_delta_table
from testkit.iceberg_read import as_iceberg_types, iceberg_table, key_of, logical_type
from testkit.iceberg_requests import migrate, on, rows, small, write, write_past_an_unusable_catalog



@contextmanager
def hms(uri: str):
    """A Thrift client of the metastore, the test's own."""
    u = urlsplit(uri)
    transport = TTransport.TBufferedTransport(TSocket.TSocket(u.hostname, u.port))
    transport.open()
    try:
        yield Client(TBinaryProtocol.TBinaryProtocol(transport))
    finally:
        transport.close()


def hive_table(uri: str, db: str, name: str):
    with hms(uri) as client:
        try:
            return client.get_table_req(GetTableRequest(dbName=db, tblName=name)).table
        except NoSuchObjectException:
            return None


class Hive4Catalog(HiveCatalog):
    """pyiceberg 0.12's HiveCatalog with its table lookup made by `get_table_req`: its own `get_table`
    is a Thrift call Hive 4.0.1 removed (HIVE-26537; apache/iceberg-python#1222, fixed upstream after
    0.12). The rest, the entry's conversion into a pyiceberg Table (table_type, metadata_location, the
    metadata file read) and the scan, is pyiceberg's own."""

    def _get_hive_table(self, open_client, database_name, table_name):
        try:
            return open_client.get_table_req(GetTableRequest(dbName=database_name, tblName=table_name)).table
        except NoSuchObjectException as e:
            raise NoSuchTableError(f"{database_name}.{table_name}") from e


def metadata(folder, n: int) -> str:
    return f"{folder}/metadata/v{n}.metadata.json"


def test_entries_create_move_compare_and_set_and_drop(hive_metastore, tmp_path):
    cat = HiveIcebergCatalog(hive_metastore.uri)
    folder = tmp_path / "s" / "t"
    (folder / "metadata").mkdir(parents=True)
    (folder / "metadata" / "v1.metadata.json").write_text("{}")
    assert cat.entry("Ent_S", "Ent_T") is None                                   # no database yet
    assert cat.create_entry("Ent_S", "Ent_T", metadata(folder, 1)) is True     # its database made too
    assert cat.create_entry("ent_s", "ent_t", metadata(folder, 9)) is False    # the metastore's names: lower case
    assert cat.entry("ent_s", "ent_t") == metadata(folder, 1)

    got = hive_table(hive_metastore.uri, "ent_s", "ent_t")
    assert got.tableType == "EXTERNAL_TABLE" and got.parameters["EXTERNAL"] == "TRUE"
    assert got.parameters["table_type"] == "ICEBERG" and got.parameters["metadata_location"] == metadata(folder, 1)
    assert got.sd.location.rstrip("/").endswith(str(folder))

    assert cat.move_entry("ent_s", "ent_t", metadata(folder, 1), metadata(folder, 2)) is True
    assert cat.move_entry("ent_s", "ent_t", metadata(folder, 1), metadata(folder, 3)) is False   # stale expected
    got = hive_table(hive_metastore.uri, "ent_s", "ent_t")
    assert got.parameters["metadata_location"] == metadata(folder, 2)
    assert got.parameters["previous_metadata_location"] == metadata(folder, 1)

    cat.drop_entry("ent_s", "ent_t", metadata(folder, 1))                    # names v2 now: stays
    assert cat.entry("ent_s", "ent_t") == metadata(folder, 2)
    cat.drop_entry("ent_s", "ent_t", metadata(folder, 2))
    assert cat.entry("ent_s", "ent_t") is None and hive_table(hive_metastore.uri, "ent_s", "ent_t") is None
    assert (folder / "metadata" / "v1.metadata.json").read_text() == "{}"     # the entry only, never the files
    assert cat.move_entry("ent_s", "ent_t", metadata(folder, 2), metadata(folder, 3)) is False   # no entry
    cat.drop_entry("ent_s", "ent_t", metadata(folder, 2))                    # nothing to drop: no error


def test_a_metastore_that_cannot_see_the_tables_store_refuses_the_entry_with_its_own_error(hive_metastore):
    """The metastore checks the entry's folder through Hadoop's file systems; it knows no
    scheme nosuchfs. Its MetaException arrives as itself (not as the TypeError an immutable Thrift
    exception gives when something sets its traceback), and nothing is made."""
    cat = HiveIcebergCatalog(hive_metastore.uri)
    with pytest.raises(MetaException, match='No FileSystem for scheme "nosuchfs"'):
        cat.create_entry("fs_s", "fs_t", "nosuchfs://bucket/wh/fs_s/fs_t/metadata/v1.metadata.json")
    assert cat.entry("fs_s", "fs_t") is None


def test_concurrent_moves_from_one_value_exactly_one_wins(hive_metastore, tmp_path):
    """The metastore's compare-and-set (HIVE-26882) holds under writers racing from the same value."""
    cat = HiveIcebergCatalog(hive_metastore.uri)
    folder = tmp_path / "race"
    assert cat.create_entry("race_s", "race_t", metadata(folder, 1))
    writers = 6
    for round_ in range(3):
        start = cat.entry("race_s", "race_t")
        barrier, won = threading.Barrier(writers), [None] * writers

        def move(i):
            barrier.wait()
            won[i] = cat.move_entry("race_s", "race_t", start, metadata(folder, 10 * (round_ + 1) + i))

        threads = [threading.Thread(target=move, args=(i,)) for i in range(writers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert won.count(True) == 1, won
        assert cat.entry("race_s", "race_t") == metadata(folder, 10 * (round_ + 1) + won.index(True))


def test_a_table_of_that_name_that_is_not_iceberg_is_left_alone(hive_metastore, tmp_path):
    other = tmp_path / "theirs"
    other.mkdir()
    theirs = HiveTable(dbName="other_s", tableName="delta_t", owner="someone", tableType="EXTERNAL_TABLE",
                       parameters={"EXTERNAL": "TRUE", "spark.sql.sources.provider": "delta"},
                       sd=StorageDescriptor(cols=[FieldSchema("col", "array<string>", None)], location=str(other),
                                            inputFormat="org.apache.hadoop.mapred.SequenceFileInputFormat",
                                            outputFormat="org.apache.hadoop.hive.ql.io.HiveSequenceFileOutputFormat",
                                            serdeInfo=SerDeInfo(serializationLib="org.apache.hadoop.hive.serde2.lazy.LazySimpleSerDe")))
    cat = HiveIcebergCatalog(hive_metastore.uri)
    assert cat.create_entry("other_s", "iceberg_t", metadata(tmp_path / "ours", 1))   # makes the database
    with hms(hive_metastore.uri) as client:
        client.create_table(theirs)
    folder = tmp_path / "ours_too"
    assert cat.entry("other_s", "delta_t") is None                  # no Iceberg entry of that name
    with pytest.raises(NotAnIcebergEntry):
        cat.create_entry("other_s", "delta_t", metadata(folder, 1))
    with pytest.raises(catalogs.ForeignEntry):                       # publishing leaves the name alone
        catalogs.publish(cat, "other_s", "delta_t", str(folder), metadata(folder, 1), os.path.exists)
    assert catalogs.forget(cat, "other_s", "delta_t", str(folder)) is False   # dropping ours: nothing there
    assert cat.move_entry("other_s", "delta_t", metadata(folder, 1), metadata(folder, 2)) is False
    cat.drop_entry("other_s", "delta_t", metadata(folder, 1))
    got = hive_table(hive_metastore.uri, "other_s", "delta_t")
    assert got.parameters["spark.sql.sources.provider"] == "delta"
    assert "table_type" not in got.parameters and "metadata_location" not in got.parameters
    assert [c.name for c in got.sd.cols] == ["col"]


SMALL, SMALL2 = small("items"), small("items2")


def assert_catalog_read_equals_delta(uri: str, db: str, name: str, path: str) -> None:
    """The table opened by name through the Hive catalog, as pyiceberg's HiveCatalog opens it, reads
    the rows, column names and types of the Delta table read with delta-rs."""
    loaded = Hive4Catalog("hms", uri=uri).load_table((db, name))
    assert loaded.metadata_location == iceberg_table(path).metadata_location
    ice = loaded.scan().to_arrow()
    delta = as_iceberg_types(read_delta_table(path))
    assert ice.column_names == delta.column_names
    assert [logical_type(f.type) for f in ice.schema] == [logical_type(f.type) for f in delta.schema]
    assert sorted(ice.to_pylist(), key=lambda r: key_of(r, ("id",))) == \
        sorted(delta.to_pylist(), key=lambda r: key_of(r, ("id",)))


def test_publish_and_forget_a_mirrored_table_read_through_the_catalog(hive_metastore, stub, server, unique_schema,
                                                                       tmp_path):
    schema = unique_schema
    db = schema.lower()
    cat = HiveIcebergCatalog(hive_metastore.uri)
    assert stub.CreateTable(on(pb.CreateTableRequest(schema_name=schema, table=SMALL))).success
    path = f"{server.warehouse}/{schema}/items"
    write(stub, schema, SMALL, tmp_path, replace=rows(range(1, 21), "first"))
    first = iceberg_table(path).metadata_location
    assert catalogs.publish(cat, schema, "items", path, first, os.path.exists) == catalogs.REGISTER
    assert catalogs.publish(cat, schema, "items", path, first, os.path.exists) == catalogs.CURRENT
    assert_catalog_read_equals_delta(hive_metastore.uri, db, "items", path)

    write(stub, schema, SMALL, tmp_path, replace=rows(range(15, 31), "second"))
    second = iceberg_table(path).metadata_location
    assert second != first
    assert catalogs.publish(cat, schema, "items", path, second, os.path.exists) == catalogs.MOVE
    assert catalogs.publish(cat, schema, "items", path, first, os.path.exists) == catalogs.AHEAD   # never backwards
    assert hive_table(hive_metastore.uri, db, "items").parameters["previous_metadata_location"] == first
    assert_catalog_read_equals_delta(hive_metastore.uri, db, "items", path)

    assert catalogs.forget(cat, schema, "items", f"{server.warehouse}/{schema}/elsewhere") is False   # not its folder
    assert cat.entry(schema, "items") == second
    assert catalogs.forget(cat, schema, "items", path) is True
    assert cat.entry(schema, "items") is None
    with pytest.raises(NoSuchTableError):
        Hive4Catalog("hms", uri=hive_metastore.uri).load_table((db, "items"))
    assert sorted(r["id"] for r in read_delta_table(path).to_pylist()) == list(range(1, 31))   # the table stays


# ---- the destination server with iceberg_catalog_uri a thrift:// URI (core/iceberg/entries.py) ------------

def test_the_servers_entries_follow_commits_a_rename_and_a_drop(hive_metastore, stub, server, unique_schema, tmp_path):
    s, db = unique_schema, unique_schema.lower()
    cfg = {"iceberg_catalog_uri": hive_metastore.uri}
    assert stub.CreateTable(on(pb.CreateTableRequest(schema_name=s, table=SMALL), cfg)).success
    path = f"{server.warehouse}/{s}/items"
    assert hive_table(hive_metastore.uri, db, "items").parameters["metadata_location"] == \
        iceberg_table(path).metadata_location                           # registered with the empty table
    write(stub, s, SMALL, tmp_path, replace=rows(range(1, 21), "a"), config=cfg)
    first = iceberg_table(path).metadata_location
    assert_catalog_read_equals_delta(hive_metastore.uri, db, "items", path)
    write(stub, s, SMALL, tmp_path, replace=rows(range(15, 31), "b"), delete=[{"id": 1}], config=cfg)
    assert hive_table(hive_metastore.uri, db, "items").parameters["previous_metadata_location"] == first
    assert_catalog_read_equals_delta(hive_metastore.uri, db, "items", path)

    migrate(stub, s, "items", config=cfg, rename=pb.RenameOperation(
        rename_table=pb.RenameTable(from_table="items", to_table="items_v2")))
    assert hive_table(hive_metastore.uri, db, "items") is None
    assert_catalog_read_equals_delta(hive_metastore.uri, db, "items_v2", f"{server.warehouse}/{s}/items_v2")
    migrate(stub, s, "items_v2", config=cfg, drop=pb.DropOperation(drop_table=True))
    assert hive_table(hive_metastore.uri, db, "items_v2") is None


def test_the_server_leaves_a_hive_table_of_that_name_alone_and_survives_a_metastore_down(
        hive_metastore, stub, server, unique_schema, tmp_path):
    s, db = unique_schema, unique_schema.lower()
    cfg = {"iceberg_catalog_uri": hive_metastore.uri}
    mine = HiveIcebergCatalog(hive_metastore.uri)
    assert mine.create_entry(s, "placeholder", metadata(tmp_path / "p", 1))   # the database
    with hms(hive_metastore.uri) as client:
        client.create_table(HiveTable(
            dbName=db, tableName="items", owner="someone", tableType="EXTERNAL_TABLE",
            parameters={"EXTERNAL": "TRUE"},
            sd=StorageDescriptor(cols=[FieldSchema("id", "bigint", None)], location=str(tmp_path / "theirs"),
                                 inputFormat="org.apache.hadoop.mapred.TextInputFormat",
                                 outputFormat="org.apache.hadoop.hive.ql.io.HiveIgnoreKeyTextOutputFormat",
                                 serdeInfo=SerDeInfo(serializationLib="org.apache.hadoop.hive.serde2.lazy.LazySimpleSerDe"))))
    assert stub.CreateTable(on(pb.CreateTableRequest(schema_name=s, table=SMALL), cfg)).success
    write(stub, s, SMALL, tmp_path, replace=rows(range(1, 4), "a"), config=cfg)
    assert "the Iceberg catalog holds another table under this name" in server.log_text()
    migrate(stub, s, "items", config=cfg, drop=pb.DropOperation(drop_table=True))   # nothing of ours to drop there
    theirs = hive_table(hive_metastore.uri, db, "items")
    assert theirs.owner == "someone" and "metadata_location" not in theirs.parameters

    with socket.socket() as sock:                                          # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        down = {"iceberg_catalog_uri": f"thrift://127.0.0.1:{sock.getsockname()[1]}"}
    assert stub.CreateTable(on(pb.CreateTableRequest(schema_name=s, table=SMALL2), down)).success
    path = write_past_an_unusable_catalog(stub, server, s, SMALL2, tmp_path, down, hidden="secret-value")
    assert f"{s}.items2: Iceberg catalog entry not moved to the newest metadata (HiveCatalogUnavailable)" in \
        server.log_text()
    write(stub, s, SMALL2, tmp_path, replace=rows(range(6, 8), "c"), config=cfg)   # the metastore back: registered
    assert_catalog_read_equals_delta(hive_metastore.uri, db, "items2", path)



# ---- a table on S3: the metastore (a Hadoop process) sees the table's folder through S3A --------------

@pytest.fixture(scope="module")
def s3_metastore(s3_server, tmp_path_factory):
    """A metastore of its own whose Hadoop side reaches the session's S3 server (S3A, keys in its
    environment), as a metastore of Iceberg tables on S3 must."""
    from tools.local_cluster.metastore import LocalMetastore

    with LocalMetastore(tmp_path_factory.mktemp("s3-metastore"), s3_server.url("hive-iceberg-wh"), s3=s3_server) as ms:
        yield ms


def test_an_entry_of_a_table_on_s3_loads_by_name(s3_metastore, s3_server, tmp_path):
    import pyarrow as pa
    from pyiceberg.catalog.sql import SqlCatalog

    io = {"py-io-impl": "pyiceberg.io.pyarrow.PyArrowFileIO", "s3.endpoint": s3_server.endpoint_url,
          "s3.region": s3_server.region, "s3.access-key-id": s3_server.access_key_id,
          "s3.secret-access-key": s3_server.secret_access_key}
    location = s3_server.url("hive-iceberg/s3_s/orders")
    # A real Iceberg table on S3, made by pyiceberg itself (its own catalog, only to write it)
    maker = SqlCatalog("maker", uri=f"sqlite:///{tmp_path / 'maker.db'}", warehouse=s3_server.url("unused"), **io)
    maker.create_namespace("s3_s")
    made = maker.create_table(("s3_s", "orders"), schema=pa.schema([("id", pa.int64()), ("name", pa.string())]),
                              location=location)
    made.append(pa.table({"id": [1, 2, 3], "name": ["a", "b", "c"]}))
    metadata_location = maker.load_table(("s3_s", "orders")).metadata_location
    assert metadata_location.startswith(location + "/metadata/")

    cat = HiveIcebergCatalog(s3_metastore.uri)
    exists = lambda path: made.io.new_input(path).exists()   # noqa: E731
    assert catalogs.publish(cat, "S3_S", "Orders", location, metadata_location, exists) == catalogs.REGISTER
    entry = hive_table(s3_metastore.uri, "s3_s", "orders")
    assert entry.parameters["metadata_location"] == metadata_location             # the URL as written
    assert entry.sd.location == "s3a://" + location[len("s3://"):]                # Hadoop's spelling
    loaded = Hive4Catalog("hms", uri=s3_metastore.uri, **io).load_table(("s3_s", "orders"))
    assert sorted(loaded.scan().to_arrow().to_pylist(), key=lambda r: r["id"]) == \
        [{"id": 1, "name": "a"}, {"id": 2, "name": "b"}, {"id": 3, "name": "c"}]
    assert catalogs.forget(cat, "S3_S", "Orders", location) is True
    assert hive_table(s3_metastore.uri, "s3_s", "orders") is None
    assert any(k.endswith(".metadata.json") for k in s3_server.list_keys("hive-iceberg/s3_s/orders/metadata/"))


def test_a_name_the_metastore_cannot_hold_is_refused_before_anything_is_written(hive_metastore, stub, server):
    s = "dashed-schema-hive-iceberg"
    try:
        stub.CreateTable(on(pb.CreateTableRequest(schema_name=s, table=SMALL), {"iceberg_catalog_uri": hive_metastore.uri}))
        raise AssertionError("the request was not refused")
    except grpc.RpcError as e:
        assert e.code() == grpc.StatusCode.INVALID_ARGUMENT, e
        assert "cannot be an entry of the Iceberg Hive catalog" in e.details() and "ASCII letters" in e.details()
    assert not os.path.exists(f"{server.warehouse}/{s}")
