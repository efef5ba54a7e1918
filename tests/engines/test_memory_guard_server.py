"""The Sail MERGE memory guard (core/memory.py, docs/sail-merge-memory.md) on a real server: a
Sail server started with a tiny budget refuses a MERGE over it, naming the Spark engine, and
leaves the table as it was. The unit tests of the estimate, the budget setting and the message are
tests/unit/test_memory_guard.py.
"""
from __future__ import annotations

import datetime as dt

import grpc

from delta_destination.doors.fivetran._proto import destination_sdk_pb2 as pb
from delta_destination.settings import MEMORY_BUDGET_ENV
from testkit.delta_read import delta_version, read_delta_table
from testkit.fivetran_requests import batch_file, col, expect_error, table, write_request


# ---- a real server with a tiny budget ------------------------------------------------------

T0 = dt.datetime(2024, 5, 1, 12, 0, 0, tzinfo=dt.timezone.utc)
T = table("guarded", col("id", "LONG", pk=True), col("v", "STRING"),
          col("_fivetran_synced", "UTC_DATETIME"), col("_fivetran_deleted", "BOOLEAN"))


def rows(ids, v):
    return [{"id": i, "v": f"{v}{i}", "_fivetran_synced": T0, "_fivetran_deleted": False} for i in ids]


def test_merge_over_budget_is_refused_naming_spark_and_leaves_the_table(tmp_path, dedicated_server):
    """Budget 0.25 GB (under Sail's 0.5 GB base estimate): new keys still go through the append
    fast path; a batch touching a stored key (a MERGE) is answered RESOURCE_EXHAUSTED."""
    srv = dedicated_server(tmp_path / "wh", tmp_path / "log", engine="sail", env={MEMORY_BUDGET_ENV: "0.25"})
    try:
        stub, path = srv.stub, f"{srv.warehouse}/s/guarded"
        assert stub.CreateTable(pb.CreateTableRequest(schema_name="s", table=T)).success
        assert stub.WriteBatch(write_request("s", T, replace=[batch_file(tmp_path, T, rows(range(100), "a"))])).success
        before, v0 = read_delta_table(path).sort_by("id"), delta_version(path)
        assert before.num_rows == 100
        upsert = batch_file(tmp_path, T, rows(range(50, 150), "b"))
        err = expect_error(lambda: stub.WriteBatch(write_request("s", T, replace=[upsert])),
                           grpc.StatusCode.RESOURCE_EXHAUSTED)
        assert "--engine spark" in err.details() and "0.2 GB" in err.details() and "s.guarded" in err.details()
        assert delta_version(path) == v0
        assert read_delta_table(path).sort_by("id").equals(before)
        # A per-request configuration can raise the budget: the same MERGE then commits.
        req = write_request("s", T, replace=[upsert])
        req.configuration["memory_budget_gb"] = "64"
        assert stub.WriteBatch(req).success
        after = {r["id"]: r["v"] for r in read_delta_table(path).to_pylist()}
        assert len(after) == 150 and after[10] == "a10" and after[60] == "b60" and after[149] == "b149"
    finally:
        srv.stop()
