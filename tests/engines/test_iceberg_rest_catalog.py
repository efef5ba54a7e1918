"""Iceberg catalog entries in a REST catalog (settings iceberg=metadata, iceberg_catalog_uri the URL of
Apache Iceberg 1.10.0's own REST catalog server, tools/iceberg_rest_server.py; docs/iceberg.md "A REST
catalog"): real gRPC calls with real encrypted batch files to the session's server; each table then
loaded by name through a reader's own pyiceberg RestCatalog and read with its scan, compared with
delta-rs's read at the Delta version the snapshot names. The server (a JdbcCatalog) reads each file it
is given itself, so its answers are also a Java reader's. The entry follows every commit, a copy, a rename and
a drop, never fails a request when the server cannot be reached, and the server never writes a
metadata file of its own into the table's folder. Missing jars fail the module (`make iceberg-rest-jars`)."""
from __future__ import annotations

import os
import re

import grpc
import pytest

from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.exceptions import NoSuchTableError

from delta_destination.core.iceberg.catalogs import AHEAD, publish
from delta_destination.core.iceberg.rest_catalog import RestIcebergCatalog
from delta_destination.doors.fivetran._proto import destination_sdk_pb2 as pb
from testkit.delta_read import delta_version
from testkit.iceberg_read import assert_catalog_in_step, newest_metadata
from testkit.iceberg_requests import migrate, on, rows, small, write, write_past_an_unusable_catalog
from tools.emulator import free_port
from tools.iceberg_rest_server import IcebergRestServer

SMALL = small("orders")
MIRROR_FILE = re.compile(r"^v\d+\.metadata\.json$")


@pytest.fixture(scope="module")
def iceberg_rest_server():
    with IcebergRestServer() as rest:
        yield rest


def catalog_config(rest) -> dict:
    return {"iceberg_catalog_uri": rest.url}


def reader(rest) -> RestCatalog:
    """A reader's own RestCatalog (not the destination's object)."""
    return RestCatalog("reader", uri=rest.url)


def only_mirror_metadata_files(path: str) -> None:
    """Every *.metadata.json of the folder is one the mirror wrote (the server wrote none of its own)."""
    names = [n for n in os.listdir(f"{path}/metadata") if n.endswith(".metadata.json")]
    assert names and all(MIRROR_FILE.match(n) for n in names), names


def assert_catalog_reads_delta(rest, schema: str, name: str, path: str) -> int:
    """The table loaded by name from the REST catalog names the newest metadata file and reads as the
    Delta table at the newest version; returns that version."""
    version = assert_catalog_in_step(reader(rest), schema, name, path)
    only_mirror_metadata_files(path)
    return version


def entry(rest, schema: str, name: str):
    try:
        return reader(rest).load_table((schema, name)).metadata_location
    except NoSuchTableError:
        return None


def test_the_entry_follows_every_commit_a_copy_a_rename_and_a_drop(stub, server, unique_schema, tmp_path,
                                                                   iceberg_rest_server):
    s, rest = unique_schema, iceberg_rest_server
    cfg = catalog_config(rest)
    assert stub.CreateTable(on(pb.CreateTableRequest(schema_name=s, table=SMALL), cfg)).success
    path = f"{server.warehouse}/{s}/orders"
    assert assert_catalog_reads_delta(rest, s, "orders", path) == 0      # registered with the empty table
    write(stub, s, SMALL, tmp_path, replace=rows(range(1, 21), "a"), config=cfg)
    first = entry(rest, s, "orders")
    assert assert_catalog_reads_delta(rest, s, "orders", path) == delta_version(path)
    write(stub, s, SMALL, tmp_path, replace=rows(range(15, 31), "b"), delete=[{"id": 1}], config=cfg)
    assert entry(rest, s, "orders") != first                              # moved
    assert assert_catalog_reads_delta(rest, s, "orders", path) == delta_version(path)
    assert os.path.exists(first)                                          # the move dropped no file
    assert (s,) in reader(rest).list_namespaces()

    migrate(stub, s, "orders", config=cfg, copy=pb.CopyOperation(copy_table=pb.CopyTable(from_table="orders",
                                                                                       to_table="orders_copy")))
    assert_catalog_reads_delta(rest, s, "orders_copy", f"{server.warehouse}/{s}/orders_copy")   # a copy has its own
    assert entry(rest, s, "orders") == newest_metadata(path)

    migrate(stub, s, "orders", config=cfg, rename=pb.RenameOperation(
        rename_table=pb.RenameTable(from_table="orders", to_table="orders_v2")))
    assert entry(rest, s, "orders") is None                               # the old name names nothing
    assert_catalog_reads_delta(rest, s, "orders_v2", f"{server.warehouse}/{s}/orders_v2")

    migrate(stub, s, "orders_v2", config=cfg, drop=pb.DropOperation(drop_table=True))
    assert entry(rest, s, "orders_v2") is None


def test_the_move_re_reads_the_entry_and_never_takes_another_writers(stub, server, unique_schema, tmp_path,
                                                                    iceberg_rest_server):
    """The primitives on the real server: a move from a file the entry no longer names is refused, a
    move from the one it names replaces it (this server ignores register's overwrite: dropped and
    registered again, without purge), an older file never replaces a newer one, a stale drop leaves
    the entry."""
    s, rest = unique_schema, iceberg_rest_server
    assert stub.CreateTable(on(pb.CreateTableRequest(schema_name=s, table=SMALL))).success
    write(stub, s, SMALL, tmp_path, replace=rows(range(1, 4), "a"))
    write(stub, s, SMALL, tmp_path, replace=rows(range(4, 6), "b"))
    path = f"{server.warehouse}/{s}/orders"
    old, new = f"{path}/metadata/v1.metadata.json", newest_metadata(path)
    catalog = RestIcebergCatalog(rest.url, "test")
    assert catalog.entry(s, "orders") is None
    assert catalog.create_entry(s, "orders", old)
    assert not catalog.create_entry(s, "orders", new)                    # exists: no second entry
    assert not catalog.move_entry(s, "orders", f"{path}/metadata/v9.metadata.json", new)
    assert entry(rest, s, "orders") == old
    assert catalog.move_entry(s, "orders", old, new)
    assert catalog.overwrites is False                                   # Iceberg 1.10's server: drop + register
    assert entry(rest, s, "orders") == new
    assert publish(catalog, s, "orders", path, old, os.path.exists) == AHEAD   # never moved back past v<N>
    assert entry(rest, s, "orders") == new
    assert catalog.move_entry(s, "orders", new, old) and entry(rest, s, "orders") == old
    assert RestIcebergCatalog(f"{rest.url}/?warehouse=lake", "test").entry(s, "orders") == old   # the parameter passes
    catalog.drop_entry(s, "orders", new)                                 # stale: left
    assert entry(rest, s, "orders") == old
    catalog.drop_entry(s, "orders", old)
    assert entry(rest, s, "orders") is None
    assert os.path.exists(old) and os.path.exists(new)                   # never purged
    only_mirror_metadata_files(path)


def test_an_unreachable_catalog_never_fails_a_request_and_the_next_commit_registers(stub, server, unique_schema,
                                                                                   tmp_path, iceberg_rest_server):
    """Decided (docs/iceberg.md): a REST catalog nothing answers at is logged without values and
    counted; CreateTable (its name check needs no server) and the write, its Delta commit and the
    metadata folder stand; the next commit with a reachable catalog registers the table."""
    s, rest = unique_schema, iceberg_rest_server
    broken = {"iceberg_catalog_uri": f"http://127.0.0.1:{free_port()}/nothing-here"}
    assert stub.CreateTable(on(pb.CreateTableRequest(schema_name=s, table=SMALL), broken)).success
    path = write_past_an_unusable_catalog(stub, server, s, SMALL, tmp_path, broken, hidden="nothing-here")
    write(stub, s, SMALL, tmp_path, replace=rows(range(6, 8), "c"), config=catalog_config(rest))
    assert assert_catalog_reads_delta(rest, s, "orders", path) == delta_version(path)


def test_a_schema_the_catalog_cannot_hold_is_refused_before_anything_is_written(stub, server, iceberg_rest_server):
    s = "dotted.schema_iceberg_rest"
    try:
        stub.CreateTable(on(pb.CreateTableRequest(schema_name=s, table=SMALL), catalog_config(iceberg_rest_server)))
        raise AssertionError("the request was not refused")
    except grpc.RpcError as e:
        assert e.code() == grpc.StatusCode.INVALID_ARGUMENT, e
        assert "a dot there separates nested namespaces" in e.details(), e.details()
    assert not os.path.exists(f"{server.warehouse}/{s}")
