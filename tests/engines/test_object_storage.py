"""The warehouse on object storage, against a real S3 server (SeaweedFS,
tools/s3_server.py), on both engines: the core driven in-process (as
tests/engines/test_core_library.py does on a directory), tables read back by delta-rs from S3, and the
bucket listed afterwards: nothing may remain outside the tables (no staged batch, probe, trash or
half-written copy).

Storage settings are given explicitly (the settings schema's s3_* fields), so these tests also
prove they reach every client: boto3 (the destination's own files), delta-rs, Sail (a child
process when the environment says otherwise) and Spark (per-bucket S3A session settings).
"""
from __future__ import annotations

import datetime as dt
import os
import time
import uuid
from decimal import Decimal

import pyarrow as pa
import pytest

from delta_destination.core.changes import Changes, Op
from delta_destination.core.migrations import (SUCCESS, AddColumnWithDefaultValue, CopyTable, CopyTableToHistoryMode,
                                               MigrationDetails, RenameColumn, RenameTable)
from delta_destination.core.model import Column, DataType as T, TableSchema
from delta_destination.engines import session as engine_session, shipping
from delta_destination.engines.pool import EnginePool
from delta_destination.settings import Settings
from delta_destination.storage import S3Options, StorageOptions
from delta_destination.private_areas import PROBE_PREFIX, STAGING_DIR, TRASH_DIR
from delta_destination.core.table_dirs import clean_leftovers
from delta_destination.warehouse import Warehouse
from testkit.core_changes import changes, order, rows_by_id, typed
from testkit.delta_read import delta_version
from testkit.removals import leftovers, plant_dead_probe, plant_failed_create

UTC = dt.timezone.utc
ORDERS = TableSchema("orders", (
    Column("id", T.LONG, primary_key=True),
    Column("name", T.STRING),
    Column("amount", T.DECIMAL, precision=12, scale=2),
    Column("at", T.UTC_DATETIME),
))


@pytest.fixture(scope="module")
def engines(s3_server, shared_spark):
    e = EnginePool()
    yield e
    e.stop()


@pytest.fixture(params=["sail", "spark"])
def engine_name(request):
    return request.param


@pytest.fixture
def settings(s3_server, engine_name, shared_spark):
    """A fresh prefix of the bucket per test, reached with explicit storage settings."""
    values = {"warehouse": s3_server.url(f"os-{uuid.uuid4().hex[:8]}/wh"), "engine": engine_name,
              "s3_endpoint": s3_server.endpoint_url, "s3_region": s3_server.region,
              "s3_access_key_id": s3_server.access_key_id, "s3_secret_access_key": s3_server.secret_access_key}
    if engine_name == "spark":
        values["spark_remote"] = shared_spark.url
    return Settings.create(**values)





def rows(s3_server, core, settings, table="orders", schema="s") -> dict:
    return rows_by_id(core.location(settings, schema, table), s3_server.storage_options())


def keys_outside_tables(s3_server, settings, tables: set[str]) -> list[str]:
    """Every object under the warehouse that is not inside one of `tables` (schema/table dirs)."""
    prefix = settings.warehouse.split("/", 3)[3] + "/"
    outside = []
    for key in s3_server.list_keys(prefix):
        rest = key[len(prefix):]
        parts = rest.split("/")
        if rest.startswith((STAGING_DIR, TRASH_DIR, PROBE_PREFIX)) or len(parts) < 3 or "/".join(parts[:2]) not in tables:
            outside.append(rest)
    return outside


def test_every_operation_on_s3_leaves_only_tables(s3_server, core, settings):
    core.tables.create(settings, "s", ORDERS)
    assert core.location(settings, "s", "orders").startswith("s3://")
    core.writer.write(settings, "s", "orders", lambda t: changes(Changes(Op.UPSERT, typed(t, [order(i) for i in (1, 2, 3)]))))
    update = typed(ORDERS, [{"id": 1, "name": "renamed", "amount": None}], ["id", "name", "amount"])
    core.writer.write(settings, "s", "orders", lambda t: changes(
        Changes(Op.UPDATE, update, pa.table({"name": [False], "amount": [True]})),
        Changes(Op.DELETE, typed(t, [{"id": 2}], ["id"]))))
    got = rows(s3_server, core, settings)
    assert sorted(got) == [1, 3] and got[1]["name"] == "renamed" and got[1]["amount"] == Decimal("1.50")
    assert delta_version(core.location(settings, "s", "orders"), s3_server.storage_options()) == 2

    assert core.tables.alter(settings, "s", ORDERS.with_columns(ORDERS.columns + (Column("note", T.STRING),)), False)
    assert core.migrate(settings, MigrationDetails("s", "orders", RenameColumn("name", "title"))) == SUCCESS
    assert core.migrate(settings, MigrationDetails("s", "orders", AddColumnWithDefaultValue("qty", T.INT, "7"))) == SUCCESS
    assert core.migrate(settings, MigrationDetails("s", "orders", CopyTable("orders", "copy"))) == SUCCESS
    assert core.migrate(settings, MigrationDetails("s", "orders", CopyTable("orders", "copy"))) == SUCCESS   # replay
    assert core.migrate(settings, MigrationDetails("s", "orders", CopyTableToHistoryMode("orders", "hist"))) == SUCCESS
    assert core.migrate(settings, MigrationDetails("s", "copy", RenameTable("copy", "renamed"))) == SUCCESS
    assert core.migrate(settings, MigrationDetails("s", "copy", RenameTable("copy", "renamed"))) == SUCCESS  # replay
    assert core.describe(settings, "s", "copy") is None
    assert rows(s3_server, core, settings, "renamed")[1]["qty"] == 7
    assert core.table_names(settings, "s") == ["hist", "orders", "renamed"]
    core.drop_table(settings, "s", "renamed")
    core.drop_table(settings, "s", "renamed")   # replay: nothing to drop
    assert core.table_names(settings, "s") == ["hist", "orders"]
    assert core.probe(settings) is None
    # issue 40: a CreateTable over what a CREATE that died left (S3A's `name/` folder markers), and a
    # dead process's probe removed
    prefix = settings.warehouse.split("/", 3)[3] + "/"

    def plant(rel: str, data: bytes, folder: bool) -> None:
        s3_server.client().put_object(Bucket=s3_server.bucket, Key=prefix + rel + ("/" if folder else ""), Body=data)

    plant_failed_create(plant, "s/half")
    core.tables.create(settings, "s", TableSchema("half", ORDERS.columns[:2]))
    plant_dead_probe(plant)
    assert clean_leftovers(Warehouse(settings.warehouse, settings.storage)) == 1
    assert keys_outside_tables(s3_server, settings, {"s/orders", "s/hist", "s/half"}) == []
    assert leftovers(s3_server.list_keys(prefix), prefix, ["s/orders", "s/hist", "s/half"]) == []


def test_a_batch_over_the_local_relation_limit_is_staged_on_s3_and_removed(s3_server, core, settings, monkeypatch):
    monkeypatch.setattr(shipping, "LOCAL_RELATION_LIMIT", 4096)
    monkeypatch.setattr(engine_session, "LOCAL_RELATION_LIMIT", 4096)
    core.tables.create(settings, "s", ORDERS)
    batch = [order(i) for i in range(2000)]
    core.writer.write(settings, "s", "orders", lambda t: changes(Changes(Op.UPSERT, typed(t, batch))))
    core.writer.write(settings, "s", "orders", lambda t: changes(Changes(Op.UPSERT, typed(t, [order(i, "x") for i in range(1000, 3000)]))))
    got = rows(s3_server, core, settings)
    assert len(got) == 3000 and got[1500]["name"] == "x1500" and got[10]["name"] == "n10"
    assert keys_outside_tables(s3_server, settings, {"s/orders"}) == []


def test_what_a_dead_process_left_is_removed_at_the_next_start(s3_server, settings):
    """Staged batches, probes and half-written copies of a process that died (same host, its pid
    gone) are removed; those of a live process (this one) stay."""
    wh = Warehouse(settings.warehouse, settings.storage)
    dead = f"{wh.private_areas.new_staging_location().rsplit('/', 1)[1].split('.')[0]}.999999999-{uuid.uuid4().hex}"
    prefix = settings.warehouse.split("/", 3)[3]
    client = s3_server.client()
    client.put_object(Bucket=s3_server.bucket, Key=f"{prefix}/{STAGING_DIR}/{dead}/part-00000.parquet", Body=b"rows")
    client.put_object(Bucket=s3_server.bucket, Key=f"{prefix}/{PROBE_PREFIX}{dead}/_delta_log/00000000000000000000.json",
                      Body=b"{}")
    note = wh.private_areas.note_removal(wh.join("s", "half_copy"), only_without_commits=True)
    client.put_object(Bucket=s3_server.bucket, Key=f"{prefix}/s/half_copy/part-0.parquet", Body=b"rows")
    mine = wh.private_areas.new_staging_location()
    wh.storage.write_bytes(mine + "/part-00000.parquet", b"in flight")
    dead_note = note.replace(note.rsplit("/", 1)[1].split("-")[0], dead.split("-")[0])
    wh.storage.write_bytes(dead_note, wh.storage.read_bytes(note))
    wh.private_areas.done_removal(note)
    assert clean_leftovers(wh) == 3
    left = s3_server.list_keys(prefix + "/")
    assert left == [mine.split("/", 3)[3] + "/part-00000.parquet"]
    wh.storage.delete_tree(mine)
    assert s3_server.list_keys(prefix + "/") == []


@pytest.mark.parametrize("warehouse_kind", ["local", "s3"])
def test_staged_parquet_parts_keep_order_types_and_privacy(warehouse_kind, request, tmp_path):
    """A big batch's parts, written on several threads, come back as one table in the batch's
    order and types; on a local disk the folder is private and the parts uncompressed, on S3 Snappy."""
    import pyarrow.parquet as pq

    if warehouse_kind == "s3":
        s3 = request.getfixturevalue("s3_server")
        wh = Warehouse(s3.url(f"pq-{uuid.uuid4().hex[:8]}/wh"),
                       StorageOptions(s3=S3Options(endpoint=s3.endpoint_url, region=s3.region,
                                                   access_key_id=s3.access_key_id,
                                                   secret_access_key=s3.secret_access_key)))
    else:
        wh = Warehouse(str(tmp_path / "wh"))
    n = 5000
    data = pa.table({
        "op": pa.array([i % 3 for i in range(n)], pa.int8()),
        "c0": pa.array(range(n), pa.int64()),
        "c1": pa.array([f"name {i}" if i % 7 else None for i in range(n)], pa.string()),
        "c2": pa.array([Decimal(i) / 100 for i in range(n)], pa.decimal128(12, 2)),
        "c3": pa.array([dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)] * n, pa.timestamp("us", tz="UTC")),
        "c4": pa.array([bytes([i % 256]) * 3 for i in range(n)], pa.binary()),
    })
    location = wh.private_areas.new_staging_location()
    parts = [data.slice(i, 500) for i in range(0, n, 500)]
    try:
        wh.storage.write_parquet_parts(location, parts)
        names = sorted(e.location for e in wh.storage.list(location))
        assert len(names) == len(parts)
        got = pa.concat_tables(pq.read_table(pa.BufferReader(wh.storage.read_bytes(name))) for name in names)
        assert got.schema.equals(data.schema) and got.equals(data)
        codec = pq.ParquetFile(pa.BufferReader(wh.storage.read_bytes(names[0]))).metadata.row_group(0).column(1).compression
        if warehouse_kind == "local":
            assert os.stat(location).st_mode & 0o777 == 0o700
            assert codec == "UNCOMPRESSED"
        else:
            assert codec == "SNAPPY"
    finally:
        wh.storage.delete_tree(location)
    assert wh.storage.list(location) == []


@pytest.mark.parametrize("engine_name", ["sail"])
def test_small_files_are_compacted_on_s3_with_safe_commits(s3_server, engines, settings):
    """core/compaction.py on S3: delta-rs commits the compaction with put-if-absent asked for explicitly
    (aws_conditional_put, which SeaweedFS honours as AWS S3 does); the rows are unchanged."""
    from delta_destination.core.api import DeltaCore
    from delta_destination.engines.router import EngineRouter
    from deltalake import DeltaTable

    core = DeltaCore(EngineRouter(engines), door="test", compact_small_files=3)
    core.tables.create(settings, "s", ORDERS)
    for i in range(4):
        core.writer.write(settings, "s", "orders", lambda t, i=i: changes(Changes(Op.UPSERT, typed(t, [order(i)]))))
    location = core.location(settings, "s", "orders")
    opts = s3_server.storage_options()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and core.compaction.compactions == 0:
        time.sleep(0.2)
    assert core.compaction.compactions == 1, "no compaction after 4 small commits with compact_small_files=3"
    dt = DeltaTable(location, storage_options=opts)
    assert [h["operation"] for h in dt.history()].count("OPTIMIZE") == 1 and len(dt.file_uris()) < 3
    assert sorted(rows(s3_server, core, settings)) == [0, 1, 2, 3]
