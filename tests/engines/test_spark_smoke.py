"""The fast tier's one real Apache Spark run: `make test` must fail when the local Spark engine
does (its JVM, the Delta jars `make install` fetched, the Spark dialect), without the minutes the
whole Spark matrix takes (`make test-all` runs every acceptance test on Spark too).

A server started with `--engine spark` starts its own local JVM, as `make run ENGINE=spark`
does; the table it writes is read back with delta-rs."""
from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest

from testkit.fivetran_requests import batch_file, col, columns_of, describe, table, write_request
from testkit.delta_read import delta_version, read_delta_table
from delta_destination.doors.fivetran._proto import destination_sdk_pb2 as pb

T0 = dt.datetime(2024, 5, 1, 12, 0, 0, 123000, tzinfo=dt.timezone.utc)
T = table("smoke", col("id", "INT", pk=True), col("name", "STRING"), col("amount", "DECIMAL", precision=10, scale=2),
          col("at", "UTC_DATETIME"), col("_fivetran_synced", "UTC_DATETIME"), col("_fivetran_deleted", "BOOLEAN"))


def row(i, name, amount):
    return {"id": i, "name": name, "amount": Decimal(amount), "at": T0, "_fivetran_synced": T0, "_fivetran_deleted": False}


@pytest.mark.smoke
def test_a_local_spark_engine_creates_writes_and_reads_a_delta_table(tmp_path, dedicated_server):
    srv = dedicated_server(tmp_path / "wh", tmp_path / "server.log", engine="spark", own_jvm=True)
    try:
        assert "local Apache Spark engine started" in srv.log_text()
        assert srv.stub.CreateTable(pb.CreateTableRequest(schema_name="s", table=T)).success
        location = f"{srv.warehouse}/s/smoke"
        files = tmp_path / "files"
        files.mkdir()
        first = [row(1, "a", "1.50"), row(2, "b", "2.00"), row(3, "c", "-3.25")]
        assert srv.stub.WriteBatch(write_request("s", T, replace=[batch_file(files, T, first)])).success
        v = delta_version(location)
        update = [{"id": 2, "name": "B", "_fivetran_synced": T0}]
        gone = [{"id": 3, "_fivetran_synced": T0}]
        assert srv.stub.WriteBatch(write_request("s", T, replace=[batch_file(files, T, [row(4, "d", "4.00")])],
                                                 update=[batch_file(files, T, update, kind="update")],
                                                 delete=[batch_file(files, T, gone, kind="delete")])).success
        assert delta_version(location) == v + 1  # one request, one commit
        assert columns_of(describe(srv.stub, "s", "smoke"))["amount"] == ("DECIMAL", False, (10, 2))
    finally:
        srv.stop()
    rows = {r["id"]: (r["name"], r["amount"]) for r in read_delta_table(location).to_pylist()}
    assert rows == {1: ("a", Decimal("1.50")), 2: ("B", Decimal("2.00")), 4: ("d", Decimal("4.00"))}
