"""Real gRPC calls to a real server: setup form, tests, and the table DDL RPCs."""
from __future__ import annotations

import os
from datetime import datetime, timezone

import grpc
import pytest

from testkit.fivetran_requests import col, columns_of, describe, expect_error, table, ts
from testkit.delta_read import delta_version, read_delta_table
from delta_destination.doors.fivetran._proto import common_pb2, destination_sdk_pb2 as pb
from delta_destination.settings import CONNECTION_FIELDS

ALL_TYPES = [
    ("b", "BOOLEAN"), ("s", "SHORT"), ("i", "INT"), ("l", "LONG"), ("f", "FLOAT"), ("d", "DOUBLE"),
    ("nd", "NAIVE_DATE"), ("ndt", "NAIVE_DATETIME"), ("u", "UTC_DATETIME"), ("bin", "BINARY"),
    ("x", "XML"), ("str", "STRING"), ("j", "JSON"), ("t", "NAIVE_TIME"),
]


def test_configuration_form_lists_fields_and_tests(stub):
    r = stub.ConfigurationForm(common_pb2.ConfigurationFormRequest())
    assert [f.name for f in r.fields] == [f.key for f in CONNECTION_FIELDS]
    assert {f.name for f in r.fields} >= {"warehouse", "engine", "spark_remote", "memory_budget_gb", "s3_endpoint",
                                          "s3_secret_access_key", "catalog_uri"}
    assert [f.text_field for f in r.fields if f.name == "s3_secret_access_key"] == [common_pb2.Password]
    assert all(f.label for f in r.fields)
    assert {t.name for t in r.tests} == {"spark_engine", "warehouse_writable"}


def test_capabilities_csv(stub):
    assert stub.Capabilities(pb.CapabilitiesRequest()).batch_file_format == pb.CSV


def test_setup_tests_pass_and_leave_nothing(stub, server, tmp_path):
    wh = tmp_path / "wh"
    for name in ("spark_engine", "warehouse_writable"):
        r = stub.Test(common_pb2.TestRequest(name=name, configuration={"warehouse": str(wh)}))
        assert r.WhichOneof("response") == "success", r.failure
    assert os.listdir(wh) == []


def test_setup_test_reports_unwritable_warehouse(stub, tmp_path):
    f = tmp_path / "a_file"
    f.write_text("x")
    r = stub.Test(common_pb2.TestRequest(name="warehouse_writable", configuration={"warehouse": str(f / "sub")}))
    assert r.WhichOneof("response") == "failure" and "warehouse" in r.failure.lower()


def test_setup_test_unknown_name(stub):
    expect_error(lambda: stub.Test(common_pb2.TestRequest(name="nope")), grpc.StatusCode.INVALID_ARGUMENT)


def test_create_describe_round_trip_all_types(stub, unique_schema, server):
    cols = [col("id", "LONG", pk=True)] + [col(n, t) for n, t in ALL_TYPES]
    cols += [col("dec", "DECIMAL", precision=38, scale=37), col("dec2", "DECIMAL", precision=6, scale=3),
             col("vs", "STRING", sbl=120), col("_fivetran_synced", "UTC_DATETIME")]
    r = stub.CreateTable(pb.CreateTableRequest(schema_name=unique_schema, table=table("all_types", *cols)))
    assert r.success
    got = columns_of(describe(stub, unique_schema, "all_types"))
    assert list(got) == [c.name for c in cols]
    assert got["id"] == ("LONG", True, None)
    for n, t in ALL_TYPES:
        assert got[n] == (t, False, None), n
    assert got["dec"] == ("DECIMAL", False, (38, 37))
    assert got["dec2"] == ("DECIMAL", False, (6, 3))
    assert got["vs"] == ("STRING", False, 120)
    # The Delta table itself carries the types other engines see.
    schema = read_delta_table(f"{server.warehouse}/{unique_schema}/all_types").schema
    assert str(schema.field("nd").type) == "date32[day]"
    assert str(schema.field("ndt").type) == "timestamp[us]"
    assert str(schema.field("u").type) == "timestamp[us, tz=UTC]"
    assert str(schema.field("dec").type) == "decimal128(38, 37)"


def test_describe_survives_restart(tmp_path, dedicated_server):
    srv = dedicated_server(tmp_path / "wh", tmp_path / "log1")
    try:
        srv.stub.CreateTable(pb.CreateTableRequest(schema_name="s", table=table("t", col("id", "INT", pk=True), col("j", "JSON"), col("x", "XML"), col("tm", "NAIVE_TIME"))))
    finally:
        srv.stop()
    srv = dedicated_server(tmp_path / "wh", tmp_path / "log2")
    try:
        got = columns_of(describe(srv.stub, "s", "t"))
        assert got == {"id": ("INT", True, None), "j": ("JSON", False, None), "x": ("XML", False, None), "tm": ("NAIVE_TIME", False, None)}
    finally:
        srv.stop()


def test_describe_missing_table(stub, unique_schema):
    assert describe(stub, unique_schema, "nothing").not_found


def test_create_existing_table(stub, unique_schema):
    t = table("dup", col("id", "INT", pk=True), col("v", "STRING"))
    assert stub.CreateTable(pb.CreateTableRequest(schema_name=unique_schema, table=t)).success
    # Replaying the same CreateTable is safe.
    assert stub.CreateTable(pb.CreateTableRequest(schema_name=unique_schema, table=t)).success
    other = table("dup", col("id", "INT", pk=True), col("v", "LONG"))
    expect_error(lambda: stub.CreateTable(pb.CreateTableRequest(schema_name=unique_schema, table=other)), grpc.StatusCode.ALREADY_EXISTS)


@pytest.mark.parametrize("schema,name", [
    ("ok", ""), ("ok", "."), ("ok", ".."), ("ok", "a/b"), ("ok", "a\\b"), ("ok", "a\x00b"), ("ok", "a\nb"),
    ("", "t"), ("..", "t"), ("s/x", "t"), ("ok", "x" * 1100),
])
def test_unsafe_names_refused_and_nothing_written(stub, server, schema, name):
    before = sorted(os.listdir(server.warehouse)) if os.path.exists(server.warehouse) else []
    err = expect_error(lambda: stub.CreateTable(pb.CreateTableRequest(schema_name=schema, table=table(name, col("id", "INT", pk=True)))), grpc.StatusCode.INVALID_ARGUMENT)
    assert "name" in err.details()
    after = sorted(os.listdir(server.warehouse)) if os.path.exists(server.warehouse) else []
    assert before == after
    expect_error(lambda: describe(stub, schema, name), grpc.StatusCode.INVALID_ARGUMENT)


def test_create_rejects_bad_columns(stub, unique_schema):
    expect_error(lambda: stub.CreateTable(pb.CreateTableRequest(schema_name=unique_schema, table=table("t", col("a", "INT"), col("a", "LONG")))), grpc.StatusCode.INVALID_ARGUMENT)
    expect_error(lambda: stub.CreateTable(pb.CreateTableRequest(schema_name=unique_schema, table=table("t", col("a", "DECIMAL", precision=40, scale=2)))), grpc.StatusCode.INVALID_ARGUMENT)
    expect_error(lambda: stub.CreateTable(pb.CreateTableRequest(schema_name=unique_schema, table=table("t", col("a", 99)))), grpc.StatusCode.INVALID_ARGUMENT)
    assert describe(stub, unique_schema, "t").not_found


def _alter(stub, schema, t, drop=False):
    return stub.AlterTable(pb.AlterTableRequest(schema_name=schema, table=t, drop_columns=drop))


def test_alter_table_variants(stub, unique_schema, server):
    path = f"{server.warehouse}/{unique_schema}/alt"
    base = [col("id", "INT", pk=True), col("amount", "DOUBLE"), col("d", "DECIMAL", precision=10, scale=2), col("old", "STRING")]
    stub.CreateTable(pb.CreateTableRequest(schema_name=unique_schema, table=table("alt", *base)))
    # add a column, change a normal type, change DECIMAL params, JSON hint only
    t2 = [col("id", "LONG", pk=True), col("amount", "FLOAT"), col("d", "DECIMAL", precision=20, scale=4), col("old", "JSON"), col("added", "UTC_DATETIME")]
    assert _alter(stub, unique_schema, table("alt", *t2)).success
    got = columns_of(describe(stub, unique_schema, "alt"))
    assert got == {"id": ("LONG", True, None), "amount": ("FLOAT", False, None), "d": ("DECIMAL", False, (20, 4)),
                   "old": ("JSON", False, None), "added": ("UTC_DATETIME", False, None)}
    schema = read_delta_table(path).schema
    assert str(schema.field("id").type) == "int64" and str(schema.field("amount").type) == "float"
    # primary-key membership: `old` joins the key, `id` stays; a column absent from the request is kept (drop_columns=false)
    t3 = [col("id", "LONG", pk=True), col("old", "JSON", pk=True), col("added", "UTC_DATETIME")]
    assert _alter(stub, unique_schema, table("alt", *t3)).success
    got = columns_of(describe(stub, unique_schema, "alt"))
    assert set(got) == {"id", "amount", "d", "old", "added"}
    assert got["old"][1] is True and got["id"][1] is True and got["amount"][1] is False
    # drop_columns=true drops what the request does not list
    assert _alter(stub, unique_schema, table("alt", *t3), drop=True).success
    assert list(columns_of(describe(stub, unique_schema, "alt"))) == ["id", "old", "added"]
    # a replayed alter is a no-op: no new Delta commit
    v = delta_version(path)
    assert _alter(stub, unique_schema, table("alt", *t3), drop=True).success
    assert delta_version(path) == v


def test_alter_missing_table(stub, unique_schema):
    expect_error(lambda: _alter(stub, unique_schema, table("nope", col("id", "INT", pk=True))), grpc.StatusCode.NOT_FOUND)


def test_truncate_missing_table_is_success(stub, unique_schema):
    r = stub.Truncate(pb.TruncateRequest(schema_name=unique_schema, table_name="none", synced_column="_fivetran_synced", utc_delete_before=ts(datetime.now(timezone.utc))))
    assert r.success


def test_describe_reports_params_and_alter_widens_them(stub, unique_schema, server, tmp_path):
    """SDK rule: DescribeTable reports string_byte_length and DECIMAL precision/scale, and
    AlterTable widens them; stored values are kept exactly, a narrowing that would alter a
    value is refused and leaves the table as it was."""
    from decimal import Decimal

    from testkit.fivetran_requests import batch_file, write_request

    path = f"{server.warehouse}/{unique_schema}/params"
    t1 = table("params", col("id", "INT", pk=True), col("s", "STRING", sbl=64), col("d", "DECIMAL", precision=6, scale=2),
               col("_fivetran_synced", "UTC_DATETIME"))
    stub.CreateTable(pb.CreateTableRequest(schema_name=unique_schema, table=t1))
    assert columns_of(describe(stub, unique_schema, "params"))["s"] == ("STRING", False, 64)
    synced = datetime(2024, 1, 1, tzinfo=timezone.utc)
    rows = [{"id": 1, "s": "x" * 60, "d": Decimal("1234.56"), "_fivetran_synced": synced}]
    assert stub.WriteBatch(write_request(unique_schema, t1, replace=[batch_file(tmp_path, t1, rows)])).success
    t2 = table("params", col("id", "INT", pk=True), col("s", "STRING", sbl=256), col("d", "DECIMAL", precision=20, scale=4),
               col("_fivetran_synced", "UTC_DATETIME"))
    # `rewrite`: on Spark the DECIMAL growth is otherwise a type widening in place, whose table delta-rs
    # cannot read back (tests/engines/test_type_widening.py covers that one).
    assert stub.AlterTable(pb.AlterTableRequest(schema_name=unique_schema, table=t2,
                                                configuration={"column_changes": "rewrite"})).success
    got = columns_of(describe(stub, unique_schema, "params"))
    assert got["s"] == ("STRING", False, 256) and got["d"] == ("DECIMAL", False, (20, 4))
    data = read_delta_table(path)
    assert data.column("d").to_pylist() == [Decimal("1234.5600")] and data.column("s").to_pylist() == ["x" * 60]
    v = delta_version(path)
    t3 = table("params", col("id", "INT", pk=True), col("s", "STRING", sbl=256), col("d", "DECIMAL", precision=5, scale=1),
               col("_fivetran_synced", "UTC_DATETIME"))
    expect_error(lambda: _alter(stub, unique_schema, t3), grpc.StatusCode.INVALID_ARGUMENT)
    assert delta_version(path) == v
    assert read_delta_table(path).column("d").to_pylist() == [Decimal("1234.5600")]
    assert columns_of(describe(stub, unique_schema, "params"))["d"] == ("DECIMAL", False, (20, 4))


def test_alter_to_float_rounds_but_never_overflows(stub, unique_schema, server, tmp_path):
    """DOUBLE -> FLOAT rounds to FLOAT precision (what the type change asks for, as Fivetran's
    own tester input does), but a finite value beyond FLOAT's range is refused, not turned
    into infinity; DOUBLE -> INT would truncate fractions: refused."""
    from testkit.fivetran_requests import batch_file, write_request

    path = f"{server.warehouse}/{unique_schema}/flt"
    synced = datetime(2024, 1, 1, tzinfo=timezone.utc)
    t1 = table("flt", col("id", "INT", pk=True), col("x", "DOUBLE"), col("_fivetran_synced", "UTC_DATETIME"))
    stub.CreateTable(pb.CreateTableRequest(schema_name=unique_schema, table=t1))
    rows = [{"id": 1, "x": 100.45, "_fivetran_synced": synced}, {"id": 2, "x": 1e300, "_fivetran_synced": synced}]
    assert stub.WriteBatch(write_request(unique_schema, t1, replace=[batch_file(tmp_path, t1, rows)])).success
    as_float = table("flt", col("id", "INT", pk=True), col("x", "FLOAT"), col("_fivetran_synced", "UTC_DATETIME"))
    as_int = table("flt", col("id", "INT", pk=True), col("x", "INT"), col("_fivetran_synced", "UTC_DATETIME"))
    v = delta_version(path)
    expect_error(lambda: _alter(stub, unique_schema, as_float), grpc.StatusCode.INVALID_ARGUMENT)
    assert delta_version(path) == v
    rows = [{"id": 2, "x": 2.5, "_fivetran_synced": synced}]
    assert stub.WriteBatch(write_request(unique_schema, t1, replace=[batch_file(tmp_path, t1, rows)])).success
    v = delta_version(path)
    expect_error(lambda: _alter(stub, unique_schema, as_int), grpc.StatusCode.INVALID_ARGUMENT)
    assert delta_version(path) == v
    assert _alter(stub, unique_schema, as_float).success
    got = dict(zip(*[read_delta_table(path).column(c).to_pylist() for c in ("id", "x")]))
    assert abs(got[1] - 100.45) < 1e-4 and got[2] == 2.5
