"""WriteHistoryBatch (history mode) through real gRPC and real batch files, read back from Delta."""
from __future__ import annotations

import datetime as dt

import grpc
import pytest

from delta_destination.doors.fivetran._proto import destination_sdk_pb2 as pb
from testkit.delta_read import delta_version, read_delta_table
from testkit.fivetran_requests import (MAX, ON_BOTH_STORAGES, H, batch_file, col, expect_error, history_request, t, table,
                                       version, write_request)

MS = dt.timedelta(milliseconds=1)


def state(server, schema):
    rows = read_delta_table(f"{server.warehouse}/{schema}/hist").to_pylist()
    return sorted((r["id"], r["_fivetran_start"], r["_fivetran_end"], r["_fivetran_active"], r["name"], r["amount"]) for r in rows)


@pytest.fixture
def hist(stub, unique_schema):
    assert stub.CreateTable(pb.CreateTableRequest(schema_name=unique_schema, table=H)).success
    return unique_schema


@ON_BOTH_STORAGES
def test_history_lifecycle(stub, server, hist, tmp_path):
    # initial versions, including two versions of key 1 inside one batch
    r = history_request(hist, tmp_path, earliest=[{"id": 1, "_fivetran_start": t(1)}, {"id": 2, "_fivetran_start": t(1)}],
                        replace=[version(1, t(1), name="a", amount=1.0, _fivetran_end=t(2) - MS, _fivetran_active=False),
                                 version(1, t(2), name="a2", amount=2.0),
                                 version(2, t(1), name="b", amount=3.0)])
    assert stub.WriteHistoryBatch(r).success
    assert state(server, hist) == [
        (1, t(1), t(2) - MS, False, "a", 1.0), (1, t(2), MAX, True, "a2", 2.0), (2, t(1), MAX, True, "b", 3.0)]
    v = delta_version(f"{server.warehouse}/{hist}/hist")
    # a partial update of key 1 (amount only): name comes from the active version; a delete of key 2
    r = history_request(hist, tmp_path, earliest=[{"id": 1, "_fivetran_start": t(3)}],
                        update=[{"id": 1, "amount": 9.0, "_fivetran_start": t(3), "_fivetran_end": MAX, "_fivetran_active": True, "_fivetran_synced": t(3)}],
                        update_columns=["id", "amount", "_fivetran_start", "_fivetran_end", "_fivetran_active", "_fivetran_synced"],
                        delete=[{"id": 2, "_fivetran_end": t(4), "_fivetran_synced": t(4)}, {"id": 77, "_fivetran_end": t(4), "_fivetran_synced": t(4)}])
    assert stub.WriteHistoryBatch(r).success
    assert delta_version(f"{server.warehouse}/{hist}/hist") == v + 1, "one request, one commit"
    expected = [
        (1, t(1), t(2) - MS, False, "a", 1.0), (1, t(2), t(3) - MS, False, "a2", 2.0), (1, t(3), MAX, True, "a2", 9.0),
        (2, t(1), t(4), False, "b", 3.0)]
    assert state(server, hist) == expected
    # replaying the same request converges
    assert stub.WriteHistoryBatch(r).success
    assert state(server, hist) == expected
    # earliest start in the past rewinds: versions at/after it are deleted and replaced
    r = history_request(hist, tmp_path, earliest=[{"id": 1, "_fivetran_start": t(2)}],
                        replace=[version(1, t(2, 30), name="re", amount=5.0)])
    assert stub.WriteHistoryBatch(r).success
    assert state(server, hist) == [
        (1, t(1), t(2) - MS, False, "a", 1.0), (1, t(2, 30), MAX, True, "re", 5.0), (2, t(1), t(4), False, "b", 3.0)]


@ON_BOTH_STORAGES
def test_update_without_any_previous_version_is_ignored(stub, server, hist, tmp_path):
    r = history_request(hist, tmp_path,
                        update=[{"id": 5, "amount": 1.0, "_fivetran_start": t(1), "_fivetran_end": MAX, "_fivetran_active": True, "_fivetran_synced": t(1)}],
                        update_columns=["id", "amount", "_fivetran_start", "_fivetran_end", "_fivetran_active", "_fivetran_synced"])
    assert stub.WriteHistoryBatch(r).success
    assert state(server, hist) == []


@ON_BOTH_STORAGES
def test_several_updates_of_one_key_fill_from_the_pre_batch_version(stub, server, hist, tmp_path):
    """Several update versions of one key: each unmodified cell takes the value of the version
    active before the batch (not of the previous version in the batch); an explicit NULL is a
    value; _fivetran_end/_fivetran_active are the rows' own."""
    assert stub.WriteHistoryBatch(history_request(hist, tmp_path, replace=[version(1, t(1), name="a", amount=1.0)])).success
    cols = ["id", "name", "amount", "_fivetran_start", "_fivetran_end", "_fivetran_active", "_fivetran_synced"]
    from testkit.batch_files import UNMODIFIED
    ups = [
        {"id": 1, "name": "b", "amount": UNMODIFIED, "_fivetran_start": t(2), "_fivetran_end": t(3) - MS, "_fivetran_active": False, "_fivetran_synced": t(2)},
        {"id": 1, "name": UNMODIFIED, "amount": 3.0, "_fivetran_start": t(3), "_fivetran_end": t(4) - MS, "_fivetran_active": False, "_fivetran_synced": t(3)},
        {"id": 1, "name": None, "amount": UNMODIFIED, "_fivetran_start": t(4), "_fivetran_end": MAX, "_fivetran_active": True, "_fivetran_synced": t(4)},
    ]
    r = history_request(hist, tmp_path, earliest=[{"id": 1, "_fivetran_start": t(2)}], update=ups, update_columns=cols)
    assert stub.WriteHistoryBatch(r).success
    assert state(server, hist) == [
        (1, t(1), t(2) - MS, False, "a", 1.0), (1, t(2), t(3) - MS, False, "b", 1.0),
        (1, t(3), t(4) - MS, False, "a", 3.0), (1, t(4), MAX, True, None, 1.0)]


@ON_BOTH_STORAGES
def test_versions_without_end_or_active_are_chained(stub, server, hist, tmp_path):
    """Rows whose file leaves _fivetran_end/_fivetran_active out get them by chaining."""
    cols = ["id", "name", "amount", "_fivetran_start", "_fivetran_synced"]
    rows = [{"id": 1, "name": "x", "amount": 1.0, "_fivetran_start": t(1), "_fivetran_synced": t(1)},
            {"id": 1, "name": "y", "amount": 2.0, "_fivetran_start": t(2), "_fivetran_synced": t(2)}]
    req = write_request(hist, H, replace=[batch_file(tmp_path, H, rows, columns=cols)])
    assert stub.WriteHistoryBatch(pb.WriteHistoryBatchRequest(
        schema_name=hist, table=H, replace_files=req.replace_files, file_params=req.file_params, keys=req.keys)).success
    assert state(server, hist) == [(1, t(1), t(2) - MS, False, "x", 1.0), (1, t(2), MAX, True, "y", 2.0)]


@ON_BOTH_STORAGES
def test_history_batch_on_live_table_is_refused(stub, unique_schema, tmp_path):
    live = table("live", col("id", "INT", pk=True), col("_fivetran_synced", "UTC_DATETIME"))
    stub.CreateTable(pb.CreateTableRequest(schema_name=unique_schema, table=live))
    req = pb.WriteHistoryBatchRequest(schema_name=unique_schema, table=live)
    expect_error(lambda: stub.WriteHistoryBatch(req), grpc.StatusCode.INVALID_ARGUMENT)


@ON_BOTH_STORAGES
def test_alter_history_table(stub, server, hist, tmp_path):
    assert stub.WriteHistoryBatch(history_request(hist, tmp_path, replace=[version(1, t(1), name="a", amount=1.5)])).success
    cols = [c for c in H.columns if c.name != "name"]
    altered = table("hist", *cols[:2], col("note", "STRING"), *cols[2:])
    altered.columns[0].type = 4  # id INT -> LONG (a primary-key column)
    # column_changes=rewrite: the rows are read back with delta-rs below, which refuses a table whose INT
    # Spark widened in place (the default, in_place: tests/engines/test_column_mapping_upgrade.py)
    r = stub.AlterTable(pb.AlterTableRequest(schema_name=hist, table=altered, drop_columns=False,
                                             configuration={"column_changes": "rewrite"}))
    assert r.success
    from testkit.fivetran_requests import columns_of, describe
    got = columns_of(describe(stub, hist, "hist"))
    assert got["id"] == ("LONG", True, None) and got["_fivetran_start"] == ("UTC_DATETIME", True, None)
    assert "name" in got and got["name"][1] is False and "note" in got
    # history writes still work on the altered table
    assert stub.WriteHistoryBatch(history_request(hist, tmp_path, earliest=[{"id": 1, "_fivetran_start": t(2)}],
                                                  replace=[version(1, t(2), name="b", amount=2.5)])).success
    rows = sorted((r["id"], r["_fivetran_start"], r["_fivetran_active"], r["name"]) for r in
                  read_delta_table(f"{server.warehouse}/{hist}/hist").to_pylist())
    assert rows == [(1, t(1), False, "a"), (1, t(2), True, "b")]
    # drop_columns=true drops the columns absent from the request; history columns stay
    r = stub.AlterTable(pb.AlterTableRequest(schema_name=hist, table=altered, drop_columns=True))
    assert r.success
    got = columns_of(describe(stub, hist, "hist"))
    assert "name" not in got and {"_fivetran_start", "_fivetran_end", "_fivetran_active"} <= set(got)
    assert len(read_delta_table(f"{server.warehouse}/{hist}/hist")) == 2


@ON_BOTH_STORAGES
def test_update_versions_follow_the_sdk_guide_example(stub, server, hist, tmp_path):
    """The SDK guide's update_files example: several versions of one key in one batch, each
    row keeping its own _fivetran_end / _fivetran_active, unmodified columns filled from the
    version that was active before the batch; the earliest-start step matches on the real key."""
    T = {n: t(n) for n in range(1, 6)}
    assert stub.WriteHistoryBatch(history_request(hist, tmp_path, replace=[
        version(1, T[1], name="abc", amount=1.0, _fivetran_end=T[2] - MS, _fivetran_active=False),
        version(1, T[2], name="pqr", amount=2.0), version(2, T[2], name="mno", amount=3.0)])).success
    cols = ["id", "name", "amount", "_fivetran_start", "_fivetran_end", "_fivetran_active", "_fivetran_synced"]
    upd = [{"id": 1, "name": "xyz", "_fivetran_start": T[3], "_fivetran_end": T[5] - MS, "_fivetran_active": False, "_fivetran_synced": T[3]},
           {"id": 1, "name": "def", "_fivetran_start": T[5], "_fivetran_end": MAX, "_fivetran_active": True, "_fivetran_synced": T[5]},
           {"id": 2, "amount": 1000.0, "_fivetran_start": T[4], "_fivetran_end": MAX, "_fivetran_active": True, "_fivetran_synced": T[4]}]
    r = history_request(hist, tmp_path, earliest=[{"id": 1, "_fivetran_start": T[3]}, {"id": 2, "_fivetran_start": T[4]}],
                        update=upd, update_columns=cols)
    assert stub.WriteHistoryBatch(r).success
    expected = [
        (1, T[1], T[2] - MS, False, "abc", 1.0), (1, T[2], T[3] - MS, False, "pqr", 2.0),
        (1, T[3], T[5] - MS, False, "xyz", 2.0), (1, T[5], MAX, True, "def", 2.0),
        (2, T[2], T[4] - MS, False, "mno", 3.0), (2, T[4], MAX, True, "mno", 1000.0)]
    assert state(server, hist) == expected
    assert stub.WriteHistoryBatch(r).success  # a replay converges
    assert state(server, hist) == expected


@ON_BOTH_STORAGES
def test_unmodified_cells_come_from_the_version_active_before_the_batch(stub, server, hist, tmp_path):
    """SEMANTICS.md: "fill unmodified columns from the latest active version" means the version
    active before the batch, for every update version of the key -- not the previous version
    inside the batch. Rows also keep the _fivetran_end/_fivetran_active their file gives."""
    assert stub.WriteHistoryBatch(history_request(hist, tmp_path, replace=[version(1, t(1), name="base", amount=1.0)])).success
    cols = ["id", "name", "amount", "_fivetran_start", "_fivetran_end", "_fivetran_active", "_fivetran_synced"]
    upd = [{"id": 1, "name": "v1", "amount": 5.0, "_fivetran_start": t(2), "_fivetran_end": t(3) - MS, "_fivetran_active": False, "_fivetran_synced": t(2)},
           {"id": 1, "name": "v2", "_fivetran_start": t(3), "_fivetran_end": t(4), "_fivetran_active": False, "_fivetran_synced": t(3)}]
    r = history_request(hist, tmp_path, earliest=[{"id": 1, "_fivetran_start": t(2)}], update=upd, update_columns=cols)
    assert stub.WriteHistoryBatch(r).success
    assert state(server, hist) == [
        (1, t(1), t(2) - MS, False, "base", 1.0), (1, t(2), t(3) - MS, False, "v1", 5.0),
        (1, t(3), t(4), False, "v2", 1.0)]
