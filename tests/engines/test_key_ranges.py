"""The key-range check that lets a batch of provably new keys skip the engine's key probe
(core/key_ranges.py): exact on tables each engine wrote, conservative everywhere else."""
from __future__ import annotations

import pyarrow as pa
from deltalake import DeltaTable

from testkit.fivetran_requests import batch_file, col, table, write_request
from delta_destination.core.registry import TableRef, read_table_snapshot
from delta_destination.core.key_ranges import keys_cannot_match, ranges_disjoint
from delta_destination.core.model import Column, DataType, TableSchema
from delta_destination.doors.fivetran._proto import destination_sdk_pb2 as pb
from delta_destination.core.table_dirs import table_location
from delta_destination.warehouse import Warehouse
from testkit.delta_read import read_delta_table

T = table("orders", col("id", "INT", pk=True), col("region", "STRING", pk=True), col("v", "STRING"))
SCHEMA = TableSchema("orders", (Column("id", DataType.INT, primary_key=True),
                                Column("region", DataType.STRING, primary_key=True), Column("v", DataType.STRING)))


def source(ids, regions=None):
    """A positional merge source as the core builds it (op, c0.. in the table's column order)."""
    n = len(ids)
    return pa.table({"op": pa.array([0] * n, pa.int8()), "c0": pa.array(ids, pa.int32()),
                     "c1": pa.array(regions or ["eu"] * n), "c2": pa.array(["x"] * n)})


def test_file_ranges_prove_only_what_they_can():
    files = pa.table({"min.id": [1, 50, None], "max.id": [40, 90, None], "min.k": [0, 0, 0], "max.k": [9, 9, 9]})
    assert ranges_disjoint(files.slice(0, 0), {"id": (1, 2)})       # no files: nothing stored
    assert ranges_disjoint(files.slice(0, 2), {"id": (91, 99)})
    assert ranges_disjoint(files.slice(0, 2), {"id": (41, 49)})     # between two files
    assert not ranges_disjoint(files.slice(0, 2), {"id": (41, 50)})
    assert not ranges_disjoint(files, {"id": (91, 99)})             # a file without statistics
    assert ranges_disjoint(files, {"id": (91, 99), "k": (10, 12)})  # ... another key column excludes it
    assert not ranges_disjoint(files.slice(0, 2), {})               # no usable key column
    assert not ranges_disjoint(files.slice(0, 2), {"other": (1, 2)})


def test_the_log_proves_new_keys_on_tables_each_engine_writes(stub, server, engine, unique_schema, tmp_path):
    assert stub.CreateTable(pb.CreateTableRequest(schema_name=unique_schema, table=T)).success
    location = f"{server.warehouse}/{unique_schema}/orders"
    ref = TableRef(unique_schema, "orders", location, Warehouse(str(server.warehouse)))
    assert keys_cannot_match(read_table_snapshot(ref), SCHEMA, ["id", "region"], source([1, 2]))  # empty table

    rows = [{"id": i, "region": "eu", "v": f"v{i}"} for i in range(10, 20)]
    assert stub.WriteBatch(write_request(unique_schema, T, replace=[batch_file(tmp_path, T, rows)])).success
    assert keys_cannot_match(read_table_snapshot(ref), SCHEMA, ["id", "region"], source([20, 30]))
    assert keys_cannot_match(read_table_snapshot(ref), SCHEMA, ["id", "region"], source([1, 9]))
    assert not keys_cannot_match(read_table_snapshot(ref), SCHEMA, ["id", "region"], source([15]))
    assert not keys_cannot_match(read_table_snapshot(ref), SCHEMA, ["id", "region"], source([5, 25]))  # range overlaps: unsure
    # String keys prove nothing (Delta truncates their statistics).
    assert not keys_cannot_match(read_table_snapshot(ref), SCHEMA, ["region"], source([30], ["zz"]))
    if engine == "spark":  # the statistics are kept under physical names (column mapping)
        assert any(k.startswith("delta.columnMapping") for k in DeltaTable(location).metadata().configuration)

    # A deleted key is still inside a file's range: re-sending it merges, never duplicates.
    gone = [{"id": 19, "region": "eu"}]
    assert stub.WriteBatch(write_request(unique_schema, T, delete=[batch_file(tmp_path, T, gone, kind="delete")])).success
    again = [{"id": 19, "region": "eu", "v": "back"}, {"id": 40, "region": "eu", "v": "new"}]
    assert stub.WriteBatch(write_request(unique_schema, T, replace=[batch_file(tmp_path, T, again)])).success
    got = sorted((r["id"], r["v"]) for r in read_delta_table(location).to_pylist())
    assert got == [(i, f"v{i}") for i in range(10, 19)] + [(19, "back"), (40, "new")]

    # New keys above the range: the fast append, and the rows are exactly there once.
    more = [{"id": i, "region": "us", "v": "m"} for i in (50, 51)]
    assert stub.WriteBatch(write_request(unique_schema, T, replace=[batch_file(tmp_path, T, more)])).success
    ops = [h["operation"] for h in DeltaTable(location).history(1)]
    assert ops == ["WRITE"], ops
    ids = sorted(r["id"] for r in read_delta_table(location).to_pylist())
    assert ids == [*range(10, 20), 40, 50, 51]


def test_object_store_tables_and_unreadable_logs_fall_back_to_the_engine(tmp_path):
    # Stores only the engine reaches (the destination cannot list them; Azure and GCS are listed now): never proven here.
    for root in ("dbfs:/mnt/wh", "hdfs://nn:8020/wh"):
        wh = Warehouse(root)
        assert not keys_cannot_match(read_table_snapshot(TableRef("s", "t", table_location(wh, "s", "t"), wh)), SCHEMA, ["id"], source([1]))
    wh = Warehouse(str(tmp_path))
    broken = tmp_path / "s" / "t" / "_delta_log"
    broken.mkdir(parents=True)
    (broken / "00000000000000000000.json").write_text("not json\n")
    assert not keys_cannot_match(read_table_snapshot(TableRef("s", "t", table_location(wh, "s", "t"), wh)), SCHEMA, ["id"], source([1]))
