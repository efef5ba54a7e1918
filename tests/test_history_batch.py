"""WriteHistoryBatch (history mode) through real gRPC and real batch files, read back from Delta."""
from __future__ import annotations

import datetime as dt

import grpc
import pytest

from batch_helpers import batch_file, write_request
from testkit.delta_read import delta_version, read_delta_table
from rpc_helpers import col, expect_error, table
from delta_destination.fivetran._proto import destination_sdk_pb2 as pb

UTC = dt.timezone.utc
MAX = dt.datetime(9999, 12, 31, 23, 59, 59, 999000, tzinfo=UTC)
MS = dt.timedelta(milliseconds=1)


def t(h, m=0):
    return dt.datetime(2024, 1, 1, h, m, tzinfo=UTC)


H = table(
    "hist",
    col("id", "INT", pk=True), col("name", "STRING"), col("amount", "DOUBLE"),
    col("_fivetran_start", "UTC_DATETIME", pk=True), col("_fivetran_end", "UTC_DATETIME"),
    col("_fivetran_active", "BOOLEAN"), col("_fivetran_synced", "UTC_DATETIME"),
)


def version(i, start, **values):
    r = {"id": i, "_fivetran_start": start, "_fivetran_end": MAX, "_fivetran_active": True, "_fivetran_synced": start}
    r.update(values)
    return r


def history_request(schema, tmp_path, *, earliest=(), update=(), replace=(), delete=(), update_columns=None):
    base = write_request(
        schema, H,
        replace=[batch_file(tmp_path, H, list(replace))] if replace else [],
        update=[batch_file(tmp_path, H, list(update), kind="update", columns=update_columns)] if update else [],
        delete=[batch_file(tmp_path, H, list(delete), kind="delete", columns=["id", "_fivetran_end", "_fivetran_synced"])] if delete else [],
    )
    e_files = [batch_file(tmp_path, H, list(earliest), kind="earliest", columns=["id", "_fivetran_start"])] if earliest else []
    req = pb.WriteHistoryBatchRequest(
        schema_name=schema, table=H, replace_files=base.replace_files, update_files=base.update_files,
        delete_files=base.delete_files, earliest_start_files=[p for p, _ in e_files], file_params=base.file_params,
    )
    for k, v in base.keys.items():
        req.keys[k] = v
    for p, k in e_files:
        req.keys[p] = k
    return req


def state(server, schema):
    rows = read_delta_table(f"{server.warehouse}/{schema}/hist").to_pylist()
    return sorted((r["id"], r["_fivetran_start"], r["_fivetran_end"], r["_fivetran_active"], r["name"], r["amount"]) for r in rows)


@pytest.fixture
def hist(stub, unique_schema):
    assert stub.CreateTable(pb.CreateTableRequest(schema_name=unique_schema, table=H)).success
    return unique_schema


def test_history_lifecycle(stub, server, hist, tmp_path):
    # initial versions, including two versions of key 1 inside one batch
    r = history_request(hist, tmp_path, earliest=[{"id": 1, "_fivetran_start": t(1)}, {"id": 2, "_fivetran_start": t(1)}],
                        replace=[version(1, t(1), name="a", amount=1.0), version(1, t(2), name="a2", amount=2.0),
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


def test_update_without_any_previous_version_is_ignored(stub, server, hist, tmp_path):
    r = history_request(hist, tmp_path,
                        update=[{"id": 5, "amount": 1.0, "_fivetran_start": t(1), "_fivetran_end": MAX, "_fivetran_active": True, "_fivetran_synced": t(1)}],
                        update_columns=["id", "amount", "_fivetran_start", "_fivetran_end", "_fivetran_active", "_fivetran_synced"])
    assert stub.WriteHistoryBatch(r).success
    assert state(server, hist) == []


def test_several_updates_of_one_key_chain_and_fill(stub, server, hist, tmp_path):
    assert stub.WriteHistoryBatch(history_request(hist, tmp_path, replace=[version(1, t(1), name="a", amount=1.0)])).success
    cols = ["id", "name", "amount", "_fivetran_start", "_fivetran_end", "_fivetran_active", "_fivetran_synced"]
    from testkit.batch_files import UNMODIFIED
    ups = [
        {"id": 1, "name": "b", "amount": UNMODIFIED, "_fivetran_start": t(2), "_fivetran_end": MAX, "_fivetran_active": True, "_fivetran_synced": t(2)},
        {"id": 1, "name": UNMODIFIED, "amount": 3.0, "_fivetran_start": t(3), "_fivetran_end": MAX, "_fivetran_active": True, "_fivetran_synced": t(3)},
        {"id": 1, "name": None, "amount": UNMODIFIED, "_fivetran_start": t(4), "_fivetran_end": MAX, "_fivetran_active": True, "_fivetran_synced": t(4)},
    ]
    r = history_request(hist, tmp_path, earliest=[{"id": 1, "_fivetran_start": t(2)}], update=ups, update_columns=cols)
    assert stub.WriteHistoryBatch(r).success
    assert state(server, hist) == [
        (1, t(1), t(2) - MS, False, "a", 1.0), (1, t(2), t(3) - MS, False, "b", 1.0),
        (1, t(3), t(4) - MS, False, "b", 3.0), (1, t(4), MAX, True, None, 3.0)]


def test_history_batch_on_live_table_is_refused(stub, unique_schema, tmp_path):
    live = table("live", col("id", "INT", pk=True), col("_fivetran_synced", "UTC_DATETIME"))
    stub.CreateTable(pb.CreateTableRequest(schema_name=unique_schema, table=live))
    req = pb.WriteHistoryBatchRequest(schema_name=unique_schema, table=live)
    expect_error(lambda: stub.WriteHistoryBatch(req), grpc.StatusCode.INVALID_ARGUMENT)


def test_alter_history_table(stub, server, hist, tmp_path):
    assert stub.WriteHistoryBatch(history_request(hist, tmp_path, replace=[version(1, t(1), name="a", amount=1.5)])).success
    cols = [c for c in H.columns if c.name != "name"]
    altered = table("hist", *cols[:2], col("note", "STRING"), *cols[2:])
    altered.columns[0].type = 4  # id INT -> LONG (a primary-key column)
    r = stub.AlterTable(pb.AlterTableRequest(schema_name=hist, table=altered, drop_columns=False))
    assert r.success
    from rpc_helpers import columns_of, describe
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
