"""Iceberg catalog entries in a SQL catalog (settings iceberg=metadata, iceberg_catalog_uri a SQLite
URL; docs/iceberg.md "An Iceberg catalog"): real gRPC calls with real encrypted batch files to the
session's server; each table then loaded by name through pyiceberg's own SqlCatalog (an independent
reader of the catalog's tables) and read with its scan, compared with delta-rs's read at the Delta
version the snapshot names. The entry follows every commit, follows a rename, goes with a drop, is
made for a table that had none, never fails a request when the catalog is unusable, and leaves a
name that is another table's alone."""
from __future__ import annotations

import os
import sqlite3

import grpc

from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import NoSuchTableError

from delta_destination.doors.fivetran._proto import destination_sdk_pb2 as pb
from testkit.delta_read import delta_version
from testkit.iceberg_read import assert_catalog_in_step, catalog_reader, newest_metadata
from testkit.iceberg_requests import migrate, on, rows, small, write, write_past_an_unusable_catalog

NAME = "lake"
SMALL = small("orders")


def catalog_config(db) -> dict:
    return {"iceberg_catalog_uri": f"sqlite:///{db}", "iceberg_catalog_name": NAME}


def reader(db) -> SqlCatalog:
    return catalog_reader(NAME, db)


def assert_catalog_reads_delta(db, schema: str, name: str, path: str) -> int:
    return assert_catalog_in_step(reader(db), schema, name, path)


def entry(db, schema: str, name: str):
    with sqlite3.connect(db) as c:
        return c.execute("SELECT metadata_location, previous_metadata_location FROM iceberg_tables "
                         "WHERE catalog_name=? AND table_namespace=? AND table_name=?", (NAME, schema, name)).fetchone()


def test_the_entry_follows_every_commit_a_copy_a_rename_and_a_drop(stub, server, unique_schema, tmp_path):
    s, db = unique_schema, tmp_path / "catalog.db"
    cfg = catalog_config(db)
    assert stub.CreateTable(on(pb.CreateTableRequest(schema_name=s, table=SMALL), cfg)).success
    path = f"{server.warehouse}/{s}/orders"
    assert assert_catalog_reads_delta(db, s, "orders", path) == 0      # registered with the empty table
    write(stub, s, SMALL, tmp_path, replace=rows(range(1, 21), "a"), config=cfg)
    first = entry(db, s, "orders")
    assert_catalog_reads_delta(db, s, "orders", path)
    write(stub, s, SMALL, tmp_path, replace=rows(range(15, 31), "b"), delete=[{"id": 1}], config=cfg)
    assert entry(db, s, "orders")[1] == first[0]                        # moved, the old one kept as previous
    assert assert_catalog_reads_delta(db, s, "orders", path) == delta_version(path)
    assert s in [ns[0] for ns in reader(db).list_namespaces()]

    migrate(stub, s, "orders", config=cfg, copy=pb.CopyOperation(copy_table=pb.CopyTable(from_table="orders",
                                                                                       to_table="orders_copy")))
    assert_catalog_reads_delta(db, s, "orders_copy", f"{server.warehouse}/{s}/orders_copy")   # a copy has its own
    assert entry(db, s, "orders")[0] == newest_metadata(path)

    migrate(stub, s, "orders", config=cfg, rename=pb.RenameOperation(
        rename_table=pb.RenameTable(from_table="orders", to_table="orders_v2")))
    assert entry(db, s, "orders") is None                               # the old name names nothing
    assert_catalog_reads_delta(db, s, "orders_v2", f"{server.warehouse}/{s}/orders_v2")

    migrate(stub, s, "orders_v2", config=cfg, drop=pb.DropOperation(drop_table=True))
    assert entry(db, s, "orders_v2") is None
    try:
        reader(db).load_table((s, "orders_v2"))
        raise AssertionError("a dropped table still loads from the catalog")
    except NoSuchTableError:
        pass


def test_a_table_without_an_entry_gets_one_with_its_next_commit(stub, server, unique_schema, tmp_path):
    s, db = unique_schema, tmp_path / "catalog.db"
    assert stub.CreateTable(on(pb.CreateTableRequest(schema_name=s, table=SMALL))).success
    write(stub, s, SMALL, tmp_path, replace=rows(range(1, 6), "a"))     # iceberg on, no catalog yet
    path = f"{server.warehouse}/{s}/orders"
    write(stub, s, SMALL, tmp_path, replace=rows(range(4, 9), "b"), config=catalog_config(db))
    assert assert_catalog_reads_delta(db, s, "orders", path) == delta_version(path)


def test_an_unusable_catalog_never_fails_a_request_and_the_next_commit_registers(stub, server, unique_schema, tmp_path):
    """Decided (docs/iceberg.md): the entry is a pointer moved after the mirror; a catalog that cannot
    be reached (here a SQLite file in a folder that does not exist) is logged without values and
    counted, the request, its Delta commit and the metadata folder stand."""
    s, db = unique_schema, tmp_path / "catalog.db"
    assert stub.CreateTable(on(pb.CreateTableRequest(schema_name=s, table=SMALL))).success
    broken = {"iceberg_catalog_uri": f"sqlite:///{tmp_path}/no/such/folder/c.db", "iceberg_catalog_name": NAME}
    path = write_past_an_unusable_catalog(stub, server, s, SMALL, tmp_path, broken, hidden="no/such/folder")
    write(stub, s, SMALL, tmp_path, replace=rows(range(6, 8), "c"), config=catalog_config(db))
    assert assert_catalog_reads_delta(db, s, "orders", path) == delta_version(path)


def test_a_name_that_is_another_tables_is_left_alone(stub, server, unique_schema, tmp_path):
    """Decided: an entry that names an existing metadata file outside the table's own folder is
    someone else's table; the destination never moves it (a warning and a metric say so)."""
    s, db = unique_schema, tmp_path / "catalog.db"
    cfg = catalog_config(db)
    other = f"{server.warehouse}/{s}/other"
    other_t = small("other")
    assert stub.CreateTable(on(pb.CreateTableRequest(schema_name=s, table=other_t), cfg)).success
    foreign = newest_metadata(other)
    with sqlite3.connect(db) as c:   # `orders` named in the catalog as the `other` table's metadata
        c.execute("INSERT INTO iceberg_tables (catalog_name, table_namespace, table_name, metadata_location) "
                  "VALUES (?, ?, 'orders', ?)", (NAME, s, foreign))
    assert stub.CreateTable(on(pb.CreateTableRequest(schema_name=s, table=SMALL), cfg)).success
    write(stub, s, SMALL, tmp_path, replace=rows(range(1, 4), "a"), config=cfg)
    assert entry(db, s, "orders")[0] == foreign
    assert "the Iceberg catalog holds another table under this name" in server.log_text()
    migrate(stub, s, "orders", config=cfg, drop=pb.DropOperation(drop_table=True))
    assert entry(db, s, "orders")[0] == foreign                          # nor dropped with a table it is not


def refused(call) -> str:
    try:
        call()
    except grpc.RpcError as e:
        assert e.code() == grpc.StatusCode.INVALID_ARGUMENT, e
        return e.details()
    raise AssertionError("the request was not refused")


def test_a_schema_the_catalog_cannot_hold_is_refused_before_anything_is_written(stub, server, tmp_path):
    s, db = "dotted.schema_iceberg_catalog", tmp_path / "catalog.db"
    why = refused(lambda: stub.CreateTable(on(pb.CreateTableRequest(schema_name=s, table=SMALL), catalog_config(db))))
    assert "a dot there separates nested namespaces" in why, why
    assert not os.path.exists(f"{server.warehouse}/{s}")


def test_a_catalog_without_iceberg_metadata_is_refused(stub, server, unique_schema, tmp_path):
    why = refused(lambda: stub.CreateTable(pb.CreateTableRequest(schema_name=unique_schema, table=SMALL,
                                                                 configuration=catalog_config(tmp_path / "c.db"))))
    assert "iceberg_catalog_uri needs iceberg set to metadata" in why, why
