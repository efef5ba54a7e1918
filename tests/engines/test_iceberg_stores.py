"""Iceberg metadata (iceberg=metadata; docs/iceberg.md) on each object store, against the stores' real
servers as their own tests start them (SeaweedFS, Azurite, fake-gcs-server): a destination process
started as a user starts one (the store's standard variables in its environment, `--warehouse <URL>`)
takes real gRPC calls with real encrypted batch files; each table is then read with pyiceberg's own
scan, from the version hint on the store with the FileIO properties docs/iceberg.md gives a reader
of that store, and compared with delta-rs's read at the Delta version each snapshot names. And a
second writer's commit of a metadata version that exists fails on each store (put-if-absent), with
the first writer's file untouched. Housekeeping (old metadata files, expired snapshots' files)
deletes on the store too.

Engines: Sail on S3 and Azure; Apache Spark (the session's JVM) on GCS, where embedded Sail refuses
gs:// (storage/gcs.py). On Azure the reader's FileIO is the destination's StoreFileIO: pyiceberg
0.12's PyArrowFileIO keeps the account in pyarrow's path (core/iceberg/file_io.py).
"""
from __future__ import annotations

import datetime as dt
import uuid
from decimal import Decimal
from pathlib import Path

import pytest
from pyiceberg.exceptions import CommitFailedException

from delta_destination.core.iceberg.housekeeping import METADATA_VERSIONS_KEPT
from delta_destination.core.iceberg.metadata_files import MetadataFolder
from delta_destination.core.iceberg.mirror import fresh, load
from delta_destination.core.iceberg.plan import SNAPSHOTS_KEPT
from delta_destination.doors.fivetran._proto import destination_sdk_pb2 as pb
from delta_destination.settings import Settings
from delta_destination.warehouse import Warehouse
from testkit.delta_read import delta_version
from testkit.fivetran_requests import col, table
from testkit.iceberg_read import assert_every_snapshot_matches, assert_in_step, iceberg_table, register_iceberg_io
from testkit.iceberg_requests import on, write

UTC = dt.timezone.utc
SYNCED = dt.datetime(2024, 6, 1, tzinfo=UTC)
T = table("orders", col("id", "LONG", pk=True), col("name", "STRING"), col("amount", "DECIMAL", precision=10, scale=2),
          col("day", "NAIVE_DATE"), col("utc", "UTC_DATETIME"), col("_fivetran_deleted", "BOOLEAN"),
          col("_fivetran_synced", "UTC_DATETIME"))
STORES = ["s3", "azure", "gcs"]


def row(i, **over):
    r = {"id": i, "name": f"name {i}", "amount": Decimal(f"{i}.25"), "day": dt.date(2024, 1, 1 + i % 28),
         "utc": dt.datetime(2024, 5, 6, 7, 8, 9, 123000, tzinfo=UTC), "_fivetran_deleted": False,
         "_fivetran_synced": SYNCED}
    r.update(over)
    return r


class StoreUnderTest:
    """One store's server, as the mirror's settings and a reader each reach it."""

    def __init__(self, name: str, request):
        self.name = name
        if name == "s3":
            self.server = request.getfixturevalue("s3_server")
            s3 = self.server
            self.settings = {"s3_endpoint": s3.endpoint_url, "s3_region": s3.region,
                             "s3_access_key_id": s3.access_key_id, "s3_secret_access_key": s3.secret_access_key}
            self.secret = s3.secret_access_key
            # a reader's PyArrowFileIO (pyarrow's S3FileSystem is path-style unless told otherwise)
            self.reader_io = {"py-io-impl": "pyiceberg.io.pyarrow.PyArrowFileIO", "s3.endpoint": s3.endpoint_url,
                              "s3.region": s3.region, "s3.access-key-id": s3.access_key_id,
                              "s3.secret-access-key": s3.secret_access_key}
            self.engine, self.extra = "sail", ()
        elif name == "azure":
            self.server = az = request.getfixturevalue("azure_server")
            self.settings = az.settings()
            self.secret = az.account_key
            host = az.endpoint_url.split("://", 1)[1]
            self.reader_io = {"py-io-impl": "delta_destination.core.iceberg.file_io.StoreFileIO",
                              "adls.account-name": az.account, "adls.account-key": az.account_key,
                              "adls.blob-storage-authority": host, "adls.dfs-storage-authority": host,
                              "adls.blob-storage-scheme": "http", "adls.dfs-storage-scheme": "http"}
            self.engine, self.extra = "sail", ()
        else:
            self.server = gcs = request.getfixturevalue("gcs_server")
            self.settings = gcs.settings()
            self.secret = ""
            # the emulator takes any token; pyiceberg has no anonymous GCS setting
            self.reader_io = {"py-io-impl": "pyiceberg.io.pyarrow.PyArrowFileIO", "gcs.service.host": gcs.endpoint_url,
                              "gcs.oauth2.token": "emulator", "gcs.oauth2.token-expires-at": str(4102444800000)}
            self.engine, self.extra = None, ("--spark-remote", request.getfixturevalue("shared_spark").url)

    def url(self, prefix: str) -> str:
        return self.server.url(prefix)

    def warehouse(self, root: str) -> Warehouse:
        settings = Settings.create(root, engine="sail" if self.name != "gcs" else None, iceberg="metadata",
                                   **self.settings)
        return Warehouse(settings.warehouse, settings.storage)


@pytest.fixture(params=STORES)
def store(request) -> StoreUnderTest:
    return StoreUnderTest(request.param, request)


def test_a_table_mirrored_through_a_server_reads_the_same_as_iceberg_on_each_store(store, dedicated_server, tmp_path):
    warehouse = store.url(f"ice-{uuid.uuid4().hex[:8]}/wh")
    srv = dedicated_server(warehouse, tmp_path / "server.log", store.extra, engine=store.engine, env=store.server.env())
    path = f"{warehouse}/s/orders"
    register_iceberg_io(path, store.reader_io)
    assert srv.stub.CreateTable(on(pb.CreateTableRequest(schema_name="s", table=T))).success
    assert_in_step(path)                                                # empty, with its schema
    write(srv.stub, "s", T, tmp_path, replace=[row(i) for i in range(1, 31)], timeout=600)
    assert_in_step(path)
    write(srv.stub, "s", T, tmp_path, replace=[row(i, name=f"new {i}") for i in range(25, 41)],
          delete=[{"id": i, "_fivetran_synced": SYNCED} for i in range(1, 6)], timeout=600)
    assert_in_step(path)                                                       # upserts and hard deletes
    added = table("orders", *T.columns, col("note", "STRING"))
    assert srv.stub.AlterTable(on(pb.AlterTableRequest(schema_name="s", table=added))).success
    write(srv.stub, "s", added, tmp_path, replace=[row(i, note=f"note {i}") for i in range(100, 104)], timeout=600)
    assert assert_in_step(path) == delta_version(path)
    assert assert_every_snapshot_matches(path) == list(range(delta_version(path) + 1))   # one per Delta version

    ice = iceberg_table(path)
    assert ice.metadata.location.rstrip("/") == path                    # the full URL readers resolve
    files = [task.file.file_path for task in ice.scan().plan_files()]
    assert files and all(f.startswith(path + "/") and f.endswith(".parquet") for f in files), files
    folder = MetadataFolder(store.warehouse(warehouse).storage, path)
    hint = folder.storage.read_bytes(f"{folder.location}/version-hint.text").decode()
    assert int(hint) == folder.newest_version() == len(folder.versions())   # listed on the store, hint after

    # Housekeeping on the store: old metadata files and expired snapshots' files deleted there.
    for i in range(METADATA_VERSIONS_KEPT + 2):
        write(srv.stub, "s", added, tmp_path, replace=[row(200 + i, note="more")], timeout=600)
    assert_in_step(path)
    versions = folder.versions()
    assert len(versions) == METADATA_VERSIONS_KEPT + 1 and versions[-1] == int(
        folder.storage.read_bytes(f"{folder.location}/version-hint.text").decode()), versions
    kept = assert_every_snapshot_matches(path)
    assert len(kept) == SNAPSHOTS_KEPT and kept[-1] == delta_version(path), kept
    ice = iceberg_table(path)
    named = {f for snap in ice.snapshots() for f in [snap.manifest_list, *(m.manifest_path for m in snap.manifests(ice.io))]}
    present = {f"{folder.location}/{n}" for n in folder.names()}
    assert named <= present and not {f for f in present - named
                                     if not f.endswith((".metadata.json", "version-hint.text"))}, sorted(present - named)
    srv.stop()
    if store.secret:
        assert store.secret not in Path(srv.log_path).read_text(errors="replace")


def test_a_second_writers_commit_of_an_existing_version_fails_on_each_store(store):
    """Two writers, each from the same state: the first one's v1 stands, the second's commit is
    refused by the store (put-if-absent) and leaves the first one's file as it was."""
    root = store.url(f"ice2-{uuid.uuid4().hex[:8]}/wh")
    wh = store.warehouse(root)
    location = f"{wh.root}/s/t"
    folder = MetadataFolder(wh.storage, location)
    assert folder.newest_version() is None
    one, two = fresh(wh, location, None), fresh(wh, location, None)
    one.transaction().set_properties({"writer": "one"}).commit_transaction()
    with pytest.raises(CommitFailedException, match="version 1 was written by another writer"):
        two.transaction().set_properties({"writer": "two"}).commit_transaction()
    assert folder.versions() == [1]
    assert load(wh, location).metadata.properties["writer"] == "one"
    # the store's conditional create itself, byte for byte
    assert not folder.put_if_absent(folder.version_file(1), b"{}")
    assert load(wh, location).metadata.properties["writer"] == "one"
    assert folder.put_if_absent(folder.version_file(2), b"two") and not folder.put_if_absent(folder.version_file(2), b"x")
    assert wh.storage.read_bytes(folder.version_file(2)) == b"two" and folder.newest_version() == 2
    folder.delete(folder.version_file(2))
    assert folder.versions() == [1]
