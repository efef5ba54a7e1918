"""The Iceberg mirror's pure parts (type mapping, stable field ids, the plan from Delta actions to
snapshots, data files from add actions) and the mirror itself on delta-rs tables in this process
(no engine): hand-written Delta commits with deletion vectors make it stale, never wrong."""
from __future__ import annotations

import json
import os

import pyarrow as pa
import pytest
from deltalake import write_deltalake
from pyiceberg.conversions import from_bytes
from pyiceberg.types import (BinaryType, BooleanType, DateType, DecimalType, DoubleType, FloatType, IntegerType,
                             LongType, StringType, TimestampType, TimestamptzType)

from delta_destination.core.iceberg.data_files import data_file
from delta_destination.core.iceberg.metadata_files import MetadataFolder
from delta_destination.core.iceberg.mirror import STALE_PROPERTY, IcebergMirror
from delta_destination.core.iceberg.plan import FileAdd, plan_commits, plan_jump
from delta_destination.core.iceberg.schemas import (UnmirrorableTable, delta_columns, iceberg_type, mirrored_schema)
from delta_destination.core.write_plan import deletion_vectors_first
from delta_destination.engines.router import EngineChoice
from delta_destination.settings import Settings
from delta_destination.warehouse import Warehouse
from delta_destination.storage import LocalStorage, StorageOptions
from testkit.iceberg_read import assert_every_snapshot_matches, assert_same_table, iceberg_table, mirrored_version


def schema_string(*fields):
    return json.dumps({"type": "struct", "fields": [
        {"name": n, "type": t, "nullable": True, "metadata": m or {}} for n, t, *rest in fields for m in [rest[0] if rest else None]]})


def test_delta_types_map_to_iceberg_types():
    assert [iceberg_type(t) for t in ("boolean", "byte", "short", "integer", "long", "float", "double", "string",
                                      "binary", "date", "timestamp", "timestamp_ntz", "decimal(38,37)")] == [
        BooleanType(), IntegerType(), IntegerType(), IntegerType(), LongType(), FloatType(), DoubleType(), StringType(),
        BinaryType(), DateType(), TimestamptzType(), TimestampType(), DecimalType(38, 37)]
    for nested in ({"type": "array", "elementType": "long"}, {"type": "map"}, "interval"):
        with pytest.raises(UnmirrorableTable):
            iceberg_type(nested)


def test_field_ids_stay_with_their_names_across_schema_changes():
    v0 = mirrored_schema(delta_columns(schema_string(("id", "long"), ("a", "integer"), ("b", "string"))), {}, 0, 0)
    assert [(f.field_id, f.name) for f in v0.schema.fields] == [(1, "id"), (2, "a"), (3, "b")]
    ids = {f.name: f.field_id for f in v0.schema.fields}
    # b dropped, c added, a retyped to string (a rewrite): a keeps its id, c never reuses b's
    v1 = mirrored_schema(delta_columns(schema_string(("id", "long"), ("a", "string"), ("c", "date"))), ids, 1,
                         v0.last_column_id)
    assert [(f.field_id, f.name, f.field_type) for f in v1.schema.fields] == [
        (1, "id", LongType()), (2, "a", StringType()), (4, "c", DateType())]
    assert v1.last_column_id == 4 and v1.schema.schema_id == 1
    assert all(not f.required for f in v1.schema.fields)
    assert json.loads(v1.name_mapping()) == [{"field-id": 1, "names": ["id"]}, {"field-id": 2, "names": ["a"]},
                                             {"field-id": 4, "names": ["c"]}]


def test_column_mapping_tables_take_delta_ids_and_physical_names():
    cm = lambda i, p: {"delta.columnMapping.id": i, "delta.columnMapping.physicalName": p}
    cols = delta_columns(schema_string(("id", "long", cm(1, "col-1")), ("renamed é", "string", cm(5, "col-5"))))
    s = mirrored_schema(cols, {"renamed é": 99}, 3, 2, column_mapping=True)
    assert [(f.field_id, f.name) for f in s.schema.fields] == [(1, "id"), (5, "renamed é")]
    assert s.last_column_id == 5
    assert json.loads(s.name_mapping()) == [{"field-id": 1, "names": ["col-1"]}, {"field-id": 5, "names": ["col-5"]}]
    with pytest.raises(UnmirrorableTable):
        mirrored_schema(delta_columns(schema_string(("x", "long"))), {}, 0, 0, column_mapping=True)


def add(path, dv=None, stats=None, size=10):
    return {"add": {"path": path, "size": size, "partitionValues": {}, "modificationTime": 0, "dataChange": True,
                    "deletionVector": dv, "stats": stats}}


def live_add(table_path, name, dv=None):
    """An add action of an existing file of the table, with its real size and row count."""
    import pyarrow.parquet as pq
    full = os.path.join(table_path, name)
    stats = json.dumps({"numRecords": pq.ParquetFile(full).metadata.num_rows})
    return add(name, dv, stats, os.path.getsize(full))


def remove(path):
    return {"remove": {"path": path, "dataChange": True}}


DV = {"storageType": "u", "pathOrInlineDv": "x", "offset": 1, "sizeInBytes": 4, "cardinality": 1}


def test_plan_one_snapshot_per_version_and_none_for_deletion_vectors():
    meta = {"metaData": {"schemaString": schema_string(("id", "long")), "configuration": {}}}
    plan = plan_commits([
        (3, [add("a")]),
        (4, [meta]),                                  # metadata only: a snapshot all the same
        (5, [remove("a"), add("a", DV)]),             # a deletion vector: no snapshot
        (6, [add("b")]),                              # still one live: none
        (7, [remove("a"), add("c")]),                 # purged: the changes of 5..7 in one snapshot
    ])
    assert [(s.version, [f.path for f in s.adds], s.removes, s.metadata is not None) for s in plan.steps] == [
        (3, ["a"], (), False), (4, [], (), True), (7, ["b", "c"], ("a",), False)]
    assert not plan.stale
    stale = plan_commits([(3, [add("a")]), (4, [remove("a"), add("a", DV)])])
    assert [s.version for s in stale.steps] == [3] and stale.stale_from == 4
    # A file added and removed while deletion vectors held the snapshot back: Iceberg never sees it.
    carried = plan_commits([(1, [add("x", DV)]), (2, [add("y")]), (3, [remove("y"), remove("x"), add("z")])])
    assert [(s.version, [f.path for f in s.adds], s.removes) for s in carried.steps] == [(3, ["z"], ())]


def test_plan_jump_diffs_against_the_files_iceberg_holds():
    live = [FileAdd("b", 1, None, False), FileAdd("c", 1, None, False)]
    step = plan_jump(9, live, {"a", "b"}, {"schemaString": "{}"}).steps[0]
    assert (step.version, [f.path for f in step.adds], step.removes) == (9, ["c"], ("a",))


def test_data_file_carries_counts_and_only_exact_bounds():
    s = mirrored_schema(delta_columns(schema_string(("id", "long"), ("name", "string"), ("day", "date"),
                                                    ("at", "timestamp"))), {}, 0, 0)
    stats = json.dumps({"numRecords": 3, "nullCount": {"id": 0, "name": 1, "day": 0, "at": 0},
                        "minValues": {"id": 1, "name": "a", "day": "2024-01-01", "at": "2024-01-01T00:00:00.000Z"},
                        "maxValues": {"id": 9, "name": "z", "day": "2024-01-03", "at": "2024-01-01T00:00:00.001Z"}})
    f = data_file("/w/s/t", FileAdd("part-1.parquet", 100, stats, False), s, lambda _: pytest.fail("counted"))
    assert (f.file_path, f.record_count, f.file_size_in_bytes) == ("/w/s/t/part-1.parquet", 3, 100)
    assert f.null_value_counts == {1: 0, 2: 1, 3: 0, 4: 0} and f.value_counts == {1: 3, 2: 3, 3: 3, 4: 3}
    assert sorted(f.lower_bounds) == [1, 3]         # long and date: exact; string and timestamp: none
    assert from_bytes(LongType(), f.upper_bounds[1]) == 9 and from_bytes(DateType(), f.lower_bounds[3]) == 19723
    counted = data_file("/w/s/t", FileAdd("p.parquet", 5, None, False), s, lambda loc: 42)
    assert counted.record_count == 42


def test_tables_with_iceberg_never_get_deletion_vectors_from_the_plan():
    spark = EngineChoice("spark", "configured", False)
    assert deletion_vectors_first(spark, 9 * 2**20, {}) is not None
    assert deletion_vectors_first(spark, 9 * 2**20, {}, iceberg=True) is None


def test_put_if_absent_never_replaces(tmp_path):
    folder = MetadataFolder(LocalStorage(str(tmp_path), StorageOptions()), str(tmp_path))
    p = folder.version_file(1)
    assert folder.put_if_absent(p, b"one") and not folder.put_if_absent(p, b"two")
    assert open(p, "rb").read() == b"one" and os.listdir(tmp_path / "metadata") == ["v1.metadata.json"]
    assert folder.newest_version() == 1


@pytest.fixture
def local(tmp_path):
    settings = Settings.create(str(tmp_path), iceberg="metadata")
    return Warehouse(settings.warehouse, settings.storage), str(tmp_path / "s" / "t")


def append_commit(path: str, version: int, actions: list[dict]) -> None:
    """A commit another writer made, written as Delta's log would hold it."""
    with open(os.path.join(path, "_delta_log", f"{version:020d}.json"), "x") as out:
        for a in actions + [{"commitInfo": {"operation": "DELETE"}}]:
            out.write(json.dumps(a) + "\n")


def test_deletion_vectors_leave_iceberg_at_the_last_state_delta_had(local, caplog):
    wh, path = local
    write_deltalake(path, pa.table({"id": pa.array([1, 2, 3], pa.int64())}))
    mirror = IcebergMirror()
    assert mirror.mirror(wh, "s.t", path).outcome == "mirrored"
    first = [f for f in os.listdir(path) if f.endswith(".parquet")][0]
    append_commit(path, 1, [remove(first), live_add(path, first, DV)])
    result = mirror.mirror(wh, "s.t", path)
    assert (result.outcome, result.delta_version) == ("stale", 0)
    assert "stale from Delta version 1" in caplog.text and "deletion vectors" in caplog.text
    assert iceberg_table(path).metadata.properties[STALE_PROPERTY] == "1"
    assert mirrored_version(path) == 0
    assert [r["id"] for r in iceberg_table(path).scan().to_arrow().to_pylist()] == [1, 2, 3]   # version 0's rows
    # Upkeep's purge: the file rewritten without its deleted row, the deletion vector gone.
    write_deltalake(path, pa.table({"id": pa.array([1, 2], pa.int64())}), mode="append")   # version 2
    purged = [f for f in os.listdir(path) if f.endswith(".parquet") and f != first][0]
    append_commit(path, 3, [remove(first), remove(purged), live_add(path, purged)])
    result = mirror.mirror(wh, "s.t", path)
    assert (result.outcome, result.delta_version) == ("mirrored", 3)
    assert STALE_PROPERTY not in iceberg_table(path).metadata.properties
    assert [r["id"] for r in iceberg_table(path).scan().to_arrow().to_pylist()] == [1, 2]


def test_a_lost_metadata_file_and_a_lagging_hint_converge(local):
    wh, path = local
    mirror = IcebergMirror()
    write_deltalake(path, pa.table({"id": pa.array([1], pa.int64()), "s": pa.array(["a"])}))
    mirror.mirror(wh, "s.t", path)
    write_deltalake(path, pa.table({"id": pa.array([2], pa.int64()), "s": pa.array(["b"])}), mode="append")
    mirror.mirror(wh, "s.t", path)
    assert MetadataFolder(wh.storage, path).newest_version() == 2
    os.remove(os.path.join(path, "metadata", "v2.metadata.json"))          # lost: the hint names it
    write_deltalake(path, pa.table({"id": pa.array([3], pa.int64()), "s": pa.array(["c"])}), mode="overwrite")
    assert mirror.mirror(wh, "s.t", path).snapshots == 2                    # versions 1 and 2 again
    assert assert_same_table(path) == 2 and assert_every_snapshot_matches(path) == [0, 1, 2]
    assert mirror.mirror(wh, "s.t", path).outcome == "current"


def test_setting_is_refused_only_where_put_if_absent_cannot_be_had():
    from delta_destination.errors import InvalidRequest
    assert Settings.create("/w").iceberg == "off"
    assert Settings.create("s3://bucket/w", iceberg="metadata").iceberg == "metadata"
    key = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
    assert Settings.create("abfss://c@a.dfs.core.windows.net/w", iceberg="metadata", azure_account_key=key)
    assert Settings.create("gs://b/w", iceberg="metadata", gcs_endpoint="http://127.0.0.1:1")
    for warehouse, more, why in [
            ("abfss://c@a.dfs.core.windows.net/w", {}, "default credential chain"),   # no key to sign with
            ("az://c/w", {"azure_account_key": key, "azure_account_name": "a"}, "instead of az://"),
            ("gs://b/w", {}, "gcs_credentials_file"),
            ("hdfs://nn/w", {}, "no conditional create")]:
        with pytest.raises(InvalidRequest, match=why) as info:
            Settings.create(warehouse, iceberg="metadata", **more)
        assert key not in str(info.value)
    with pytest.raises(InvalidRequest, match="iceberg must be one of"):
        Settings.create("/w", iceberg="catalog")


def test_snapshots_expire_once_vacuum_may_delete_their_files(local):
    wh, path = local
    mirror = IcebergMirror()
    write_deltalake(path, pa.table({"id": pa.array([1, 2], pa.int64())}))
    mirror.mirror(wh, "s.t", path)
    first = [f for f in os.listdir(path) if f.endswith(".parquet")][0]
    # Two commits of another writer, ten and nine days ago: version 1 removed version 0's file.
    day = 86_400_000
    import time
    now = int(time.time() * 1000)
    write_deltalake(path, pa.table({"id": pa.array([3], pa.int64())}), mode="append")    # version 1, rewritten below
    second = [f for f in os.listdir(path) if f.endswith(".parquet") and f != first][0]
    os.remove(os.path.join(path, "_delta_log", f"{1:020d}.json"))
    with open(os.path.join(path, "_delta_log", f"{1:020d}.json"), "x") as out:
        for a in (remove(first), live_add(path, second), {"commitInfo": {"timestamp": now - 10 * day, "operation": "WRITE"}}):
            out.write(json.dumps(a) + "\n")
    with open(os.path.join(path, "_delta_log", f"{2:020d}.json"), "x") as out:
        out.write(json.dumps({"commitInfo": {"timestamp": now - 9 * day, "operation": "SET TBLPROPERTIES"}}) + "\n")
    write_deltalake(path, pa.table({"id": pa.array([4], pa.int64())}), mode="append")    # version 3, now
    assert mirror.mirror(wh, "s.t", path).delta_version == 3
    kept = [int(s.summary["delta-version"]) for s in iceberg_table(path).snapshots()]
    assert kept == [2, 3]             # 0 and 1: their successors' files are past Delta's 7-day retention
    assert assert_every_snapshot_matches(path) == [2, 3]
