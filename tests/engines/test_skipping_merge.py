"""Keyed writes into a table of many files touch only the files that can hold a batch key
(core/target_files.py), and stay correct whatever the keys: in one file, in many, in none, at a
file's edges, spanning the whole table; integer, string and composite keys; upserts, partial
updates and deletes in one request; history mode. Rows are read back with delta-rs's query
engine, the files each commit removed (or marked) from the Delta log."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from deltalake import DeltaTable

from delta_destination.core.target_files import FileStats, candidate_files, file_stats
from delta_destination.core.registry import TableRef, read_table_snapshot
from delta_destination.doors.fivetran._proto import destination_sdk_pb2 as pb
from delta_destination.warehouse import Warehouse
from testkit.delta_read import read_delta_table
from testkit.fivetran_requests import batch_file, col, table, write_request

ORDERS = table("orders", col("id", "LONG", pk=True), col("v", "STRING"), col("n", "INT"))
# Five files of keys [0, 50), [100, 150), ... [400, 450): gaps between them hold no key.
FILE_STARTS = (0, 100, 200, 300, 400)


def commits(location: str) -> list[int]:
    return sorted(int(p.name[:20]) for p in Path(location, "_delta_log").glob("*.json"))


def last_commit(location: str) -> list[dict]:
    path = Path(location, "_delta_log", f"{commits(location)[-1]:020d}.json")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def touched_paths(actions: list[dict]) -> set[str]:
    """Files a commit removed (rewritten, or re-added with a deletion vector)."""
    return {a["remove"]["path"] for a in actions if "remove" in a}


def file_ranges(location: str, key: str = "id") -> dict[str, tuple[int, int]]:
    """Each live file's [min, max] of `key` (under its physical name on tables with column mapping)."""
    import pyarrow as pa

    dt = DeltaTable(location)
    field = next(f for f in dt.schema().fields if f.name == key)
    physical = (field.metadata or {}).get("delta.columnMapping.physicalName", key)
    adds = pa.table(dt.get_add_actions(flatten=True)).to_pydict()
    return {p: (lo, hi) for p, lo, hi in zip(adds["path"], adds[f"min.{physical}"], adds[f"max.{physical}"])}


def build_orders(stub, schema, tmp_path) -> str:
    assert stub.CreateTable(pb.CreateTableRequest(schema_name=schema, table=ORDERS)).success
    for start in FILE_STARTS:   # new keys each time: plain appends, one file each
        rows = [{"id": i, "v": f"v{i}", "n": i} for i in range(start, start + 50)]
        assert stub.WriteBatch(write_request(schema, ORDERS, replace=[batch_file(tmp_path, ORDERS, rows)])).success
    return schema


def expected_rows() -> dict[int, tuple]:
    return {i: (f"v{i}", i) for s in FILE_STARTS for i in range(s, s + 50)}


def rows_of(location: str) -> dict[int, tuple]:
    got = read_delta_table(location).to_pylist()
    out = {r["id"]: (r["v"], r["n"]) for r in got}
    assert len(out) == len(got), "a key is stored twice"
    return out


def test_a_small_increment_touches_only_the_files_that_can_hold_its_keys(stub, server, engine, unique_schema, tmp_path):
    schema = build_orders(stub, unique_schema, tmp_path)
    location = f"{server.warehouse}/{schema}/orders"
    ranges = file_ranges(location)
    assert len(ranges) >= len(FILE_STARTS), ranges   # Spark writes a batch as several files
    before = commits(location)[-1]
    want = expected_rows()

    # One request: upserts at a file's edges (100, 149) and a new key in a gap (75), a partial
    # update in another file (320), a delete in a third (420); files [0, 50) and [200, 250) can hold
    # none of these keys.
    upserts = [{"id": 100, "v": "a", "n": -1}, {"id": 149, "v": "b", "n": -2}, {"id": 75, "v": "new", "n": 7}]
    update = [{"id": 320, "v": "partial"}]      # n unmodified
    delete = [{"id": 420}]
    req = write_request(schema, ORDERS, replace=[batch_file(tmp_path, ORDERS, upserts)],
                        update=[batch_file(tmp_path, ORDERS, update, kind="update")],
                        delete=[batch_file(tmp_path, ORDERS, delete, kind="delete")])
    assert stub.WriteBatch(req).success
    assert commits(location)[-1] == before + 1, "one request, one commit"
    touched = touched_paths(last_commit(location))
    may_touch = {p for p, (lo, hi) in ranges.items() if any(lo <= k <= hi for k in (100, 149, 75, 320, 420))}
    assert touched and touched <= may_touch, (touched, may_touch)
    want.update({100: ("a", -1), 149: ("b", -2), 75: ("new", 7), 320: ("partial", 320)})
    del want[420]
    assert rows_of(location) == want

    # Keys in no file at all (gaps and beyond the ends): nothing removed, only the new rows added.
    news = [{"id": k, "v": "gap", "n": k} for k in (60, 260, 999, -5)]
    assert stub.WriteBatch(write_request(schema, ORDERS, replace=[batch_file(tmp_path, ORDERS, news)])).success
    assert touched_paths(last_commit(location)) == set()
    want.update({k: ("gap", k) for k in (60, 260, 999, -5)})

    # A batch whose keys span the whole table stays right.
    spread = [{"id": s + 10, "v": "all", "n": 0} for s in FILE_STARTS] + [{"id": 5000, "v": "all", "n": 0}]
    assert stub.WriteBatch(write_request(schema, ORDERS, replace=[batch_file(tmp_path, ORDERS, spread)])).success
    want.update({s + 10: ("all", 0) for s in FILE_STARTS} | {5000: ("all", 0)})
    assert rows_of(location) == want


def test_files_that_cannot_hold_a_key_are_not_even_read_on_an_engine_that_skips(stub, server, engine, unique_schema, tmp_path):
    """The proof that the predicate reaches the engine's file skipping: a file whose range cannot
    hold a batch key is made unreadable, and the MERGE must still succeed (an engine that read it
    would fail). Sail 0.7.2 reads every file of a MERGE's target (docs/big-tables.md), so this is
    asked of the engines whose dialect says they skip."""
    from delta_destination.engines.dialect import dialect_for

    if not dialect_for(engine).merge_skips_files_by_target_predicate:
        assert engine == "sail"
        return
    schema = build_orders(stub, unique_schema, tmp_path)
    location = f"{server.warehouse}/{schema}/orders"
    far = [Path(location, p) for p, (lo, hi) in file_ranges(location).items() if lo >= 400]
    assert far
    good = {p: p.read_bytes() for p in far}
    try:
        for p in far:
            p.write_bytes(b"not parquet" * 100)
        rows = [{"id": 10, "v": "x", "n": 1}, {"id": 120, "v": "y", "n": 2}]
        assert stub.WriteBatch(write_request(schema, ORDERS, replace=[batch_file(tmp_path, ORDERS, rows)])).success
    finally:
        for p, data in good.items():
            p.write_bytes(data)
    want = expected_rows()
    want.update({10: ("x", 1), 120: ("y", 2)})
    assert rows_of(location) == want


KEYED = table("events", col("_fivetran_id", "STRING", pk=True), col("region", "STRING"), col("n", "INT"))


def test_string_keys_with_and_without_exact_literals(stub, server, engine, unique_schema, tmp_path):
    """Hash keys (printable ASCII) get a predicate; a key with a quote, a backslash or a character
    outside ASCII has no exact literal here, so its batch gets none; both stay right."""
    assert stub.CreateTable(pb.CreateTableRequest(schema_name=unique_schema, table=KEYED)).success
    location = f"{server.warehouse}/{unique_schema}/events"
    groups = [[f"{g}{i:040x}" for i in range(20)] for g in "0a7f"]
    for keys in groups:
        rows = [{"_fivetran_id": k, "region": "eu", "n": 0} for k in keys]
        assert stub.WriteBatch(write_request(unique_schema, KEYED, replace=[batch_file(tmp_path, KEYED, rows)])).success
    odd = ["it's", "back\\slash", "é-key", "line\nbreak"]
    rows = [{"_fivetran_id": k, "region": "odd", "n": 1} for k in odd]
    assert stub.WriteBatch(write_request(unique_schema, KEYED, replace=[batch_file(tmp_path, KEYED, rows)])).success
    update = [{"_fivetran_id": groups[1][3], "region": "us", "n": 5}, {"_fivetran_id": "it's", "region": "us", "n": 6},
              {"_fivetran_id": "é-key", "region": "us", "n": 7}]
    assert stub.WriteBatch(write_request(unique_schema, KEYED, replace=[batch_file(tmp_path, KEYED, update)])).success
    plain = [{"_fivetran_id": groups[2][0], "region": "us", "n": 8}]
    assert stub.WriteBatch(write_request(unique_schema, KEYED, replace=[batch_file(tmp_path, KEYED, plain)])).success
    got = {r["_fivetran_id"]: (r["region"], r["n"]) for r in read_delta_table(location).to_pylist()}
    assert len(got) == 4 * 20 + 4
    assert got[groups[1][3]] == ("us", 5) and got["it's"] == ("us", 6) and got["é-key"] == ("us", 7)
    assert got[groups[2][0]] == ("us", 8) and got["back\\slash"] == ("odd", 1) and got["line\nbreak"] == ("odd", 1)
    assert got[groups[0][0]] == ("eu", 0)


def test_the_logs_statistics_name_the_candidate_files(stub, server, engine, unique_schema, tmp_path):
    """file_stats reads the key statistics under their logical names on tables of either
    engine (Spark's have column mapping: physical names in the statistics)."""
    import pyarrow as pa

    schema = build_orders(stub, unique_schema, tmp_path)
    location = f"{server.warehouse}/{schema}/orders"
    stats = file_stats(read_table_snapshot(TableRef(schema, "orders", location, Warehouse(str(server.warehouse)))), ["id"])
    assert isinstance(stats, FileStats) and stats.ordered_keys == ("id",) and stats.count >= 5
    mask = candidate_files(stats, {"id": pa.array([120, 449], pa.int64())}).to_pylist()
    ranges = list(file_ranges(location).values())
    assert 2 <= sum(mask) == sum(1 for lo, hi in ranges if lo <= 120 <= hi or lo <= 449 <= hi)


def test_history_batches_touch_only_their_keys_files(stub, server, engine, unique_schema, tmp_path):
    """A history-mode batch (close the active version, insert the new one) into a table of several
    files: the versions of other keys' files are untouched, and the key's history is right."""
    from testkit.fivetran_requests import MAX, H, history_request, t, version

    assert stub.CreateTable(pb.CreateTableRequest(schema_name=unique_schema, table=H)).success
    location = f"{server.warehouse}/{unique_schema}/hist"
    for start in (0, 100, 200):
        ids = range(start, start + 20)
        r = history_request(unique_schema, tmp_path, earliest=[{"id": i, "_fivetran_start": t(1)} for i in ids],
                            replace=[version(i, t(1), name=f"n{i}", amount=1.0) for i in ids])
        assert stub.WriteHistoryBatch(r).success
    ranges = file_ranges(location)
    r = history_request(unique_schema, tmp_path, earliest=[{"id": 105, "_fivetran_start": t(2)}],
                        replace=[version(105, t(2), name="v2", amount=2.0)])
    before = commits(location)[-1]
    assert stub.WriteHistoryBatch(r).success
    assert commits(location)[-1] == before + 1
    touched = touched_paths(last_commit(location))
    assert touched and touched <= {p for p, (lo, hi) in ranges.items() if lo <= 105 <= hi}
    rows = read_delta_table(location).to_pylist()
    mine = sorted((r["_fivetran_start"], r["_fivetran_active"], r["name"]) for r in rows if r["id"] == 105)
    assert mine == [(t(1), False, "n105"), (t(2), True, "v2")]
    assert len(rows) == 61 and all(r["_fivetran_active"] and r["_fivetran_end"] == MAX for r in rows if r["id"] != 105)


def test_a_table_sail_gave_deletion_vectors_is_written_right_by_either_engine(stub, server, engine, unique_schema, tmp_path):
    """Tables of 64 MiB get deletion vectors from Sail before its next MERGE (the write plan's
    deletion_vectors_first; at that size here the test would take minutes): the same protocol change is
    made with an embedded Sail of the test's own, then the server's engine MERGEs into the table:
    replaced and deleted rows are marked, not copied, and the rows read back right."""
    from pysail.spark import SparkConnectServer
    from pyspark.sql import SparkSession

    schema = build_orders(stub, unique_schema, tmp_path)
    location = f"{server.warehouse}/{schema}/orders"
    sail = SparkConnectServer(ip="127.0.0.1", port=0)
    sail.start(background=True)
    try:
        host, port = sail.listening_address
        spark = SparkSession.builder.remote(f"sc://{host}:{port}").getOrCreate()
        spark.sql(f"CREATE TABLE dv_orders USING delta LOCATION '{location}'")
        spark.sql("ALTER TABLE dv_orders SET TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")
        spark.stop()
    finally:
        sail.stop()
    protocol = DeltaTable(location).protocol()
    assert "deletionVectors" in (protocol.reader_features or [])
    upserts = [{"id": 110, "v": "u", "n": 1}, {"id": 5000, "v": "new", "n": 2}]
    update = [{"id": 210, "v": "p"}]
    delete = [{"id": 310}]
    req = write_request(schema, ORDERS, replace=[batch_file(tmp_path, ORDERS, upserts)],
                        update=[batch_file(tmp_path, ORDERS, update, kind="update")],
                        delete=[batch_file(tmp_path, ORDERS, delete, kind="delete")])
    assert stub.WriteBatch(req).success
    actions = last_commit(location)
    info = next(a["commitInfo"] for a in actions if "commitInfo" in a)
    assert info["operation"] == "MERGE"
    assert int((info.get("operationMetrics") or {}).get("numTargetRowsCopied") or 0) == 0
    assert any((a.get("add") or {}).get("deletionVector") for a in actions)
    want = expected_rows()
    want.update({110: ("u", 1), 5000: ("new", 2), 210: ("p", 210)})
    del want[310]
    assert rows_of(location) == want
